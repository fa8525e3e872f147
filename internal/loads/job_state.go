package loads

import (
	"fmt"

	"github.com/kvp2p/kvp2p/internal/fsm"
)

// jobState is a load or store job's place in its life, from the moment it
// is in t.jobs. A job that fails at submission never enters the map.
//
//	state       event                                             next
//	jobRunning  load succeeded (loadDone: slots committed)         jobDone
//	            load failed (loadDone: result published)           jobHolding
//	            store settled (storeDone, or its session reaped)   jobDone
//	            store submitted with no fetch yet (SubmitStore)    jobParked
//	jobParked   a fetch bound its request (bind)                   jobRunning
//	            unbound timeout, engine gone, shutdown             jobDone
//	jobHolding  no writer can touch its slots any more (release)   jobDone
//
// jobDone is terminal: the job leaves t.jobs as it enters it.
type jobState uint8

const (
	jobRunning jobState = iota // a load in flight, or a store served on a session
	jobParked                  // a PD store waiting for its decoder's first fetch
	jobHolding                 // a failed load: result published, its slots still held
	jobDone                    // settled and gone
)

var jobStateNames = [...]string{"running", "parked", "holding", "done"}

func (s jobState) String() string {
	if int(s) < len(jobStateNames) {
		return jobStateNames[s]
	}
	return fmt.Sprintf("jobState(%d)", s)
}

func legalJobMove(from, to jobState) bool {
	switch from {
	case jobRunning:
		return to == jobDone || to == jobHolding || to == jobParked
	case jobParked:
		return to == jobRunning || to == jobDone
	case jobHolding:
		return to == jobDone
	}
	return false
}

// moveJob changes j's state, and takes it out of t.jobs when it is done;
// an illegal move is reported (fsm.Illegal).
func (t *Table) moveJob(j *job, to jobState) {
	if !legalJobMove(j.st, to) {
		fsm.Illegal(t.log, fmt.Sprintf("loads: job %d (kind %d)", j.id, j.kind), j.st, to)
	}
	j.st = to
	if to == jobDone {
		delete(t.jobs, j.id)
	}
}
