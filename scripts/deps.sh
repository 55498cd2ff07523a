#!/bin/sh
# deps.sh TARGET...: makes sure the machine has what `make TARGET` needs
# (test, demo, demo-mpi, generate; scripts/deps.txt lists it), before the
# target runs.
#
# Missing packages are installed with apt-get when running as root on a
# machine that has it (unless XDPFAB_NO_INSTALL=1); otherwise deps.sh names
# what is missing and how to install it, and fails. With everything there
# it only looks (no apt, no network) and prints nothing.
#
# Environment: GO, the go command the Makefile uses (checked for test and
# demo); XDPFAB_DEPS_FILE, another requirements file (tests use it).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
list=${XDPFAB_DEPS_FILE:-$root/scripts/deps.txt}
GO=${GO:-go}
[ $# -gt 0 ] || { echo "usage: deps.sh TARGET..." >&2; exit 2; }
targets=$*

wanted() { # wanted TARGETS: does a requested target appear in TARGETS?
	for t in $targets; do
		case ",$1," in *",$t,"*) return 0 ;; esac
	done
	return 1
}

present() { # present PROBE
	case $1 in
	cmd:*)
		name=${1#cmd:}
		command -v "$name" >/dev/null 2>&1 && return 0
		for d in /usr/local/sbin /usr/sbin /sbin; do
			[ -x "$d/$name" ] && return 0
		done
		return 1 ;;
	file:*) [ -e "${1#file:}" ] ;;
	sh:*) sh "$(script "${1#sh:}")" check >/dev/null 2>&1 ;;
	*) echo "deps: $list: unknown probe $1" >&2; exit 2 ;;
	esac
}

script() { # script SCRIPT: its path (relative to the repository unless absolute)
	case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac
}

# scan sets pkgs (Debian packages to install), builds (sh: scripts to run)
# and lack (what is missing, for the message).
scan() {
	pkgs= builds= lack=
	while read -r tg pkg probe _; do
		case $tg in '' | '#'*) continue ;; esac
		wanted "$tg" || continue
		present "$probe" && continue
		case $probe in
		sh:*) builds="$builds ${probe#sh:}" ;;
		*) pkgs="$pkgs $pkg" ;;
		esac
		lack="$lack $pkg(${probe#*:})"
	done <"$list"
}

scan
if [ -n "$lack" ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && [ "${XDPFAB_NO_INSTALL:-}" != 1 ]; then
		echo "deps: installing for make $targets:$lack"
		log=$(mktemp)
		if [ -n "$pkgs" ]; then
			# The lock timeout waits out another apt run (several
			# checkouts may run make test at once).
			if ! { apt-get -o DPkg::Lock::Timeout=300 update -qq &&
				DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq $pkgs; } >"$log" 2>&1; then
				cat "$log" >&2
				rm -f "$log"
				echo "deps: apt-get install$pkgs failed" >&2
				exit 1
			fi
		fi
		for s in $builds; do
			if ! sh "$(script "$s")" install >"$log" 2>&1; then
				cat "$log" >&2
				rm -f "$log"
				echo "deps: $s install failed" >&2
				exit 1
			fi
		done
		rm -f "$log"
		scan
		if [ -n "$lack" ]; then
			echo "deps: still missing after installing:$lack" >&2
			exit 1
		fi
	else
		echo "deps: make $targets needs what this machine lacks (package(command or file)):" >&2
		echo "   $lack" >&2
		if [ -n "$pkgs" ]; then
			echo "deps: install it as root with: apt-get install$pkgs" >&2
		fi
		for s in $builds; do
			echo "deps: and build with: sh $s install" >&2
		done
		echo "deps: (make $targets run as root on Debian installs it itself)" >&2
		exit 1
	fi
fi

# Go: the version go.mod names (a newer go fetches that toolchain itself).
if wanted test,demo,demo-mpi && ! "$GO" version >/dev/null 2>&1; then
	want=$(sed -n 's/^go //p' "$root/go.mod")
	echo "deps: no Go toolchain ($GO not found): install Go $want or newer" \
		"(to /usr/local/go, which make looks in, or anywhere on PATH)" >&2
	exit 1
fi
