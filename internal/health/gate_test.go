package health

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestGateIdempotentAtOneInstant checks Policy.Gate's contract that the
// table's batched lookup relies on (it asks once for a run of a request's
// keys): every policy is driven twice by the same random calls, the
// second time with every Gate asked twice in a row; the repeat must
// answer the same, and the two runs must answer and decide the same
// throughout.
func TestGateIdempotentAtOneInstant(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for _, name := range []string{PerPeer, HostGroup, Domain} {
		var gates [3]int // by answer, over all seeds
		for seed := range seeds {
			var runs [2]string
			for twice := range 2 {
				p, err := New(name, Options{EjectionBase: 2 * time.Second, SuspectHold: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				runs[twice] = driveGates(t, p, uint64(seed), twice == 1, &gates)
			}
			if runs[0] != runs[1] {
				t.Fatalf("%s seed %d: asking Gate twice changed what the policy did:\n%s", name, seed, firstLineDiff(runs[0], runs[1]))
			}
		}
		// Not vacuous: the runs saw the gate open, wait and miss (per-peer
		// and host-group only ever open it).
		if gates[GateOpen] == 0 || name == Domain && (gates[GateWait] == 0 || gates[GateMiss] == 0) {
			t.Fatalf("%s: gate answers %v: the runs exercised too little", name, gates)
		}
	}
}

// driveGates makes 400 random policy calls and returns everything the
// policy answered and decided, one line each.
func driveGates(t *testing.T, p Policy, seed uint64, twice bool, gates *[3]int) string {
	r := rand.New(rand.NewPCG(seed, 11))
	var out strings.Builder
	now := t0
	peers := []Peer{
		{ID: "10.0.0.1:1", Domain: "a"}, {ID: "10.0.0.1:2", Domain: "a"}, {ID: "10.0.0.2:1", Domain: "b"},
		{ID: "10.0.0.3:1"}, {ID: "10.0.0.3:2", Outbound: true},
	}
	var seqs []uint64
	for i := range 400 {
		pr := peers[r.IntN(len(peers))]
		switch x := r.IntN(100); {
		case x < 35:
			g := p.Gate(now, pr)
			if twice {
				if again := p.Gate(now, pr); again != g {
					t.Fatalf("step %d: Gate(%s) answered %v, then %v at the same instant", i, pr.ID, g, again)
				}
			} else {
				gates[g]++
			}
			fmt.Fprintf(&out, "gate %s %v\n", pr.ID, g)
		case x < 50:
			p.SessionUp(now, pr)
		case x < 62:
			e := End{Cause: allCauses[r.IntN(len(allCauses))], Restart: r.IntN(8) == 0, LoadsFailed: r.IntN(3), WasUp: r.IntN(2) == 0}
			fmt.Fprintf(&out, "ended %s %v\n", pr.ID, p.SessionEnded(now, pr, e))
		case x < 70:
			fmt.Fprintf(&out, "dial %s %v\n", pr.ID, p.MayDial(now, pr))
		case x < 76:
			p.LoadDone(now, pr, r.IntN(3) > 0)
		case x < 84 && len(seqs) > 0:
			p.ProbeAck(now, pr, seqs[r.IntN(len(seqs))])
		case x < 92:
			p.Tick(now)
		default:
			now = now.Add(time.Duration(1+r.IntN(400)) * time.Millisecond)
		}
		for _, d := range p.TakeDecisions() {
			seqs = append(seqs, d.Seq)
			fmt.Fprintf(&out, "decided %+v\n", d)
		}
	}
	return out.String()
}

func firstLineDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d:\n  once:  %s\n  twice: %s", i+1, la[i], lb[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d lines", len(la), len(lb))
}
