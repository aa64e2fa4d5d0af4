package lab

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// UserHZ is the unit of the times in /proc/stat: clock ticks of 1/100 s.
// Linux reports them in USER_HZ, which is 100 on every architecture Go
// supports except alpha (`getconf CLK_TCK` prints it); the lab assumes 100.
const UserHZ = 100

// ErrNoMachineCPU is returned by ReadMachineCPU where the machine's CPU time
// cannot be read (not Linux, or no /proc/stat); reports show "n/a".
var ErrNoMachineCPU = errors.New("lab: machine CPU time needs Linux /proc/stat")

// CPUTicks is the busy time of all CPUs of the machine, all processes
// together, as counted by the aggregate "cpu" line of /proc/stat, in
// USER_HZ ticks.
type CPUTicks uint64

// Seconds converts ticks to CPU-seconds.
func (t CPUTicks) Seconds() float64 { return float64(t) / UserHZ }

// ParseProcStat returns the busy ticks of the aggregate "cpu" line of a
// /proc/stat text: user + nice + system + irq + softirq + steal. Idle and
// iowait are not busy; guest and guest_nice are already counted in user
// and nice, so they are left out.
func ParseProcStat(r io.Reader) (CPUTicks, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		// cpu user nice system idle iowait irq softirq steal [guest guest_nice]
		if len(f) < 9 {
			return 0, fmt.Errorf("lab: /proc/stat: cpu line has %d fields, want at least 8 counters", len(f)-1)
		}
		var busy CPUTicks
		for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("lab: /proc/stat: cpu line field %d: %w", i, err)
			}
			busy += CPUTicks(v)
		}
		return busy, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("lab: /proc/stat: %w", err)
	}
	return 0, errors.New(`lab: /proc/stat: no aggregate "cpu" line`)
}

// ReadMachineCPU reads the machine's busy CPU ticks so far from /proc/stat.
// It fails with ErrNoMachineCPU off Linux.
func ReadMachineCPU() (CPUTicks, error) {
	if runtime.GOOS != "linux" {
		return 0, fmt.Errorf("%w (this is %s)", ErrNoMachineCPU, runtime.GOOS)
	}
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoMachineCPU, err)
	}
	defer f.Close()
	return ParseProcStat(f)
}
