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

// CPUTicks is an amount of CPU time of the whole machine in USER_HZ ticks.
type CPUTicks uint64

// Seconds converts ticks to CPU-seconds.
func (t CPUTicks) Seconds() float64 { return float64(t) / UserHZ }

// CPUTimes are the CPU times of all CPUs of the machine so far, all
// processes together, as the aggregate "cpu" line of /proc/stat counts them.
type CPUTimes struct {
	// Busy is user + nice + system + irq + softirq + steal.
	Busy CPUTicks
	// Total is Busy + idle + iowait: the machine's capacity so far.
	Total CPUTicks
}

// Sub returns the times spent between earlier and t.
func (t CPUTimes) Sub(earlier CPUTimes) CPUTimes {
	return CPUTimes{Busy: t.Busy - earlier.Busy, Total: t.Total - earlier.Total}
}

// BusyShare returns Busy ÷ Total, 0 when Total is 0.
func (t CPUTimes) BusyShare() float64 {
	if t.Total == 0 {
		return 0
	}
	return float64(t.Busy) / float64(t.Total)
}

// ParseProcStat returns the times of the aggregate "cpu" line of a
// /proc/stat text. Busy is user + nice + system + irq + softirq + steal;
// idle and iowait are not busy; guest and guest_nice are already counted in
// user and nice, so they are left out.
func ParseProcStat(r io.Reader) (CPUTimes, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		// cpu user nice system idle iowait irq softirq steal [guest guest_nice]
		if len(f) < 9 {
			return CPUTimes{}, fmt.Errorf("lab: /proc/stat: cpu line has %d fields, want at least 8 counters", len(f)-1)
		}
		var t CPUTimes
		for i := 1; i <= 8; i++ {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return CPUTimes{}, fmt.Errorf("lab: /proc/stat: cpu line field %d: %w", i, err)
			}
			t.Total += CPUTicks(v)
			if i != 4 && i != 5 { // idle, iowait
				t.Busy += CPUTicks(v)
			}
		}
		return t, nil
	}
	if err := sc.Err(); err != nil {
		return CPUTimes{}, fmt.Errorf("lab: /proc/stat: %w", err)
	}
	return CPUTimes{}, errors.New(`lab: /proc/stat: no aggregate "cpu" line`)
}

// ReadMachineCPU reads the machine's CPU times so far from /proc/stat. It
// fails with ErrNoMachineCPU off Linux.
func ReadMachineCPU() (CPUTimes, error) {
	if runtime.GOOS != "linux" {
		return CPUTimes{}, fmt.Errorf("%w (this is %s)", ErrNoMachineCPU, runtime.GOOS)
	}
	f, err := os.Open("/proc/stat")
	if err != nil {
		return CPUTimes{}, fmt.Errorf("%w: %v", ErrNoMachineCPU, err)
	}
	defer f.Close()
	return ParseProcStat(f)
}
