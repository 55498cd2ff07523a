package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"

	"github.com/xdpfab/xdpfab/bpf"
)

// versionText is what --version prints: the module version (from the build
// info: a tag, a pseudo-version with the commit, or "(devel)"), the VCS
// revision when the build recorded one, the Go version and platform, and
// a hash of the XDP program this binary loads, so an operator can tell two
// binaries' programs apart.
func versionText() string {
	version, rev, goVersion := "(devel)", "", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" && modified {
			rev += "+dirty"
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "xdpfab %s\n", version)
	if rev != "" {
		fmt.Fprintf(&b, "revision %s\n", rev)
	}
	fmt.Fprintf(&b, "built with %s for %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	if h, err := bpfHash(); err != nil {
		fmt.Fprintf(&b, "XDP program: %v\n", err)
	} else {
		fmt.Fprintf(&b, "XDP program %s sha256 %s\n", bpf.XdpfabProgXdpfabXdp, h)
	}
	return b.String()
}

// bpfHash hashes the embedded object's programs (names and instructions,
// map references unresolved) and maps (names and layouts): the part of the
// object that decides what runs in the kernel.
func bpfHash() (string, error) {
	spec, err := bpf.LoadXdpfab()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	names := make([]string, 0, len(spec.Programs))
	for n := range spec.Programs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(h, "prog %s %v\n", n, spec.Programs[n].Type)
		if err := spec.Programs[n].Instructions.Marshal(h, binary.LittleEndian); err != nil {
			return "", fmt.Errorf("hash program %s: %w", n, err)
		}
	}
	names = names[:0]
	for n := range spec.Maps {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		m := spec.Maps[n]
		fmt.Fprintf(h, "map %s %v %d %d %d %#x\n", n, m.Type, m.KeySize, m.ValueSize, m.MaxEntries, m.Flags)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
