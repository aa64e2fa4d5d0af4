package lab_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/ordo-actors/ordo/lab"
)

const procStat = `cpu  24318 7 6534 23711 113 3 90 35 11 4
cpu0 12022 3 3227 12105 21 1 22 18 5 2
cpu1 12296 4 3306 11606 91 2 68 16 6 2
intr 2245178 0 9 0 0 0 0 0 0 0 0
ctxt 4153040
btime 1764516490
processes 7113
procs_running 3
procs_blocked 0
softirq 1183553 0 178932 21 1862 0 0 6 412810 0 589922
`

func TestParseProcStat(t *testing.T) {
	got, err := lab.ParseProcStat(strings.NewReader(procStat))
	if err != nil {
		t.Fatal(err)
	}
	// Busy: user 24318 + nice 7 + system 6534 + irq 3 + softirq 90 + steal
	// 35; guest and guest_nice excluded. Total adds idle 23711, iowait 113.
	const busy = 24318 + 7 + 6534 + 3 + 90 + 35
	want := lab.CPUTimes{Busy: busy, Total: busy + 23711 + 113}
	if got != want {
		t.Fatalf("times = %+v, want %+v", got, want)
	}
	if s := got.Busy.Seconds(); s != float64(busy)/100 {
		t.Fatalf("seconds = %v, want %v", s, float64(busy)/100)
	}
	later := lab.CPUTimes{Busy: got.Busy + 150, Total: got.Total + 200}
	if d := later.Sub(got); d != (lab.CPUTimes{Busy: 150, Total: 200}) || d.BusyShare() != 0.75 {
		t.Fatalf("difference %+v, busy share %v", d, d.BusyShare())
	}
	if (lab.CPUTimes{}).BusyShare() != 0 {
		t.Fatal("busy share of nothing is not 0")
	}
}

func TestParseProcStatRejectsBadText(t *testing.T) {
	for name, text := range map[string]string{
		"empty":        "",
		"no cpu line":  "cpu0 1 2 3 4 5 6 7 8\nintr 5\n",
		"short line":   "cpu  1 2 3 4 5\n",
		"not a number": "cpu  1 2 x 4 5 6 7 8\n",
		"negative":     "cpu  1 2 -3 4 5 6 7 8\n",
	} {
		if got, err := lab.ParseProcStat(strings.NewReader(text)); err == nil {
			t.Errorf("%s: parsed as %+v", name, got)
		}
	}
}

func TestReadMachineCPU(t *testing.T) {
	before, err := lab.ReadMachineCPU()
	if runtime.GOOS != "linux" {
		if !errors.Is(err, lab.ErrNoMachineCPU) {
			t.Fatalf("off Linux: %v, want ErrNoMachineCPU", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	after, err := lab.ReadMachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	if before.Total == 0 || before.Busy > before.Total || after.Busy < before.Busy || after.Total < before.Total {
		t.Fatalf("times went from %+v to %+v", before, after)
	}
}
