package av

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestPruneIn removes the directories and fi_addr arrays of namespaces
// not alive, and of an earlier namespace that had the caller's inode, and
// keeps the rest.
func TestPruneIn(t *testing.T) {
	avDir, shmDir := t.TempDir(), t.TempDir()
	mk := func(dir string) {
		require.NoError(t, os.MkdirAll(filepath.Join(avDir, dir), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(avDir, dir, "pin"), nil, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(shmDir, "xdpfab-av."+dir+".pin"), nil, 0o600))
	}
	for _, d := range []string{"100-5", "100-9", "200-7", "300", "400", "foo", "500-x"} {
		mk(d)
	}
	live := map[uint64]bool{100: true, 400: true}
	pruneIn(avDir, shmDir, "100-5", live)

	for d, want := range map[string]bool{
		"100-5": true,  // the caller's
		"100-9": false, // an earlier namespace with the caller's inode
		"200-7": false, // gone
		"300":   false, // gone, named before cookies
		"400":   true,  // alive
		"foo":   true,  // not a namespace's
		"500-x": true,  // not a namespace's
	} {
		_, err := os.Stat(filepath.Join(avDir, d, "pin"))
		require.Equal(t, want, err == nil, "pin of %s kept", d)
		_, err = os.Stat(filepath.Join(shmDir, "xdpfab-av."+d+".pin"))
		require.Equal(t, want, err == nil, "array of %s kept", d)
	}
}

// TestNamedAVOfGoneNamespacePruned opens a named AV in a namespace and
// deletes the namespace without unlinking it, as a killed test would:
// the namespace drops out of liveNetns, and pruning removes the AV's pin,
// its fi_addr array and the namespace's directory.
func TestNamedAVOfGoneNamespacePruned(t *testing.T) {
	testenv.RequirePriv(t)
	name := fmt.Sprintf("avtest-%d-gone", os.Getpid())
	var id, pin, arr string
	var ino uint64
	t.Run("namespace", func(t *testing.T) {
		ns := testenv.NewNetns(t)
		require.NoError(t, ns.Do(func() error {
			id, pin, arr = netnsID(), PinPath(name), AddrArrayPath(name)
			var st unix.Stat_t
			if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
				return err
			}
			ino = st.Ino
			a, err := Open(Attr{Name: name}, nil)
			if err != nil {
				return err
			}
			return a.Close()
		}))
		live, ok := liveNetns()
		require.True(t, ok)
		require.True(t, live[ino], "a namespace with a bind mount is alive")
		_, err := os.Stat(pin)
		require.NoError(t, err)
	})
	// The subtest's cleanup deleted the namespace; its AV stays pinned.
	t.Cleanup(func() { // whatever the outcome
		os.Remove(pin)
		os.Remove(arr)
		os.Remove(filepath.Dir(pin))
	})
	require.Contains(t, id, "-", "the namespace ID has its cookie")
	live, ok := liveNetns()
	require.True(t, ok)
	require.False(t, live[ino], "the deleted namespace is gone")
	self := netnsID()
	var st unix.Stat_t
	require.NoError(t, unix.Stat("/proc/thread-self/ns/net", &st))
	require.True(t, live[st.Ino], "this process's namespace is alive")

	pruneIn(filepath.Dir(filepath.Dir(pin)), filepath.Dir(arr), self, live)
	for _, p := range []string{pin, arr, filepath.Dir(pin)} {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, "%s pruned", p)
	}
}
