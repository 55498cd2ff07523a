package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"os"
	"strconv"
	"strings"

	"github.com/xdpfab/xdpfab/fabric"
)

// defaultProgress is the data_progress fi_getinfo answers when the hints
// leave it unspecified: fabric.GetInfo's (FI_PROGRESS_AUTO, a receive
// goroutine per endpoint: a passive MPI one-sided target progresses while
// it computes), or FI_PROGRESS_MANUAL when FI_XDPFAB_DATA_PROGRESS is
// "manual", for applications that poll their CQs anyway and cannot ask
// (fabtests): the thread reading the CQ then moves the packets itself,
// saving the wake-up of a second thread per completion, and an empty
// fi_cq_read drives progress (cqring.h). Hints that name a mode get it.
var defaultProgress = progressFromEnv(os.Getenv("FI_XDPFAB_DATA_PROGRESS"))

func progressFromEnv(v string) fabric.Progress {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "manual", "fi_progress_manual":
		return fabric.ProgressManual
	}
	return fabric.ProgressUnspec
}

// applyDefaultProgress sets the answers' data_progress to defaultProgress
// when the hints left it open.
func applyDefaultProgress(hints *C.struct_fi_info, list []*fabric.Info) {
	if defaultProgress == fabric.ProgressUnspec {
		return
	}
	if hints != nil && hints.domain_attr != nil && hints.domain_attr.data_progress != C.FI_PROGRESS_UNSPEC {
		return
	}
	for _, gi := range list {
		if gi.DomainAttr != nil {
			gi.DomainAttr.Progress = defaultProgress
		}
	}
}

// yieldPolls is how many fi_cq_read calls in a row that find nothing make
// the reading thread offer its processor to other threads once
// (sched_yield, cqyield.c): FI_XDPFAB_YIELD_POLLS, 0 for never (an
// application whose threads each own a core), default defaultYieldPolls.
// An empty read costs about half a microsecond, so by default a spinning
// reader offers its processor about every 15 µs: a peer process sharing
// its core runs within that. Once its yields come back at once (nothing
// else wants the core) it offers it less often (cqyield.c's quiet time).
var yieldPolls = yieldPollsFromEnv(os.Getenv("FI_XDPFAB_YIELD_POLLS"))

const defaultYieldPolls = 32

func yieldPollsFromEnv(v string) uint32 {
	if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
		return uint32(n)
	}
	return defaultYieldPolls
}
