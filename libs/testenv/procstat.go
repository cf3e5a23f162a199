package testenv

import (
	"fmt"
	"os"
	"time"

	"github.com/prometheus/procfs"
)

// ProcStat is what benchmarks report of a process, read from /proc (Linux only).
type ProcStat struct {
	// CPU is the user and system CPU time used so far.
	CPU time.Duration
	// RSS and PeakRSS (VmHWM) are resident memory now and at its highest, in bytes.
	RSS, PeakRSS uint64
}

// ProcessStat reads pid's CPU time and memory.
func ProcessStat(pid int) (ProcStat, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return ProcStat{}, err
	}
	st, err := p.Stat()
	if err != nil {
		return ProcStat{}, err
	}
	status, err := p.NewStatus()
	if err != nil {
		return ProcStat{}, err
	}
	return ProcStat{CPU: seconds(st.CPUTime()), RSS: status.VmRSS, PeakRSS: status.VmHWM}, nil
}

// CPUByName is the CPU time used so far by the running processes, summed by executable name.
func CPUByName() map[string]time.Duration {
	out := map[string]time.Duration{}
	procs, _ := procfs.AllProcs()
	for _, p := range procs {
		if st, err := p.Stat(); err == nil { // else it ended meanwhile
			out[st.Comm] += seconds(st.CPUTime())
		}
	}
	return out
}

// ChildPID is the pid of the process named name that this process started (the control plane
// of this run, not another test's).
func ChildPID(name string) (int, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && st.Comm == name && st.PPID == os.Getpid() {
			return p.PID, nil
		}
	}
	return 0, fmt.Errorf("no %s started by this process", name)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
