//go:build race

package datapath

const raceEnabled = true
