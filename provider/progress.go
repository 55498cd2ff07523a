package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"os"
	"strings"
)

// defaultProgress is the data_progress fi_getinfo answers when the hints
// leave it unspecified: FI_PROGRESS_AUTO (a receive goroutine per
// endpoint: a passive MPI one-sided target progresses while it computes),
// or what FI_XDPFAB_DATA_PROGRESS says ("auto" or "manual"), for
// applications that poll their CQs anyway and cannot ask (fabtests): with
// FI_PROGRESS_MANUAL the thread reading the CQ moves the packets itself,
// saving the wake-up of a second thread per completion. Hints that name a
// mode get that mode.
var defaultProgress = progressFromEnv(os.Getenv("FI_XDPFAB_DATA_PROGRESS"))

func progressFromEnv(v string) C.enum_fi_progress {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "manual", "fi_progress_manual":
		return C.FI_PROGRESS_MANUAL
	}
	return C.FI_PROGRESS_AUTO
}
