// Package config loads a node's configuration the way the kvp2p command
// takes it: defaults < YAML file < KVP2P_* environment < flags, into a
// Serve (the node's node.Config and the settings of the listeners the
// command opens: listen, engine, metrics_addr), then validates it.
//
// Contract: every error is an *Error (the command exits 2) or a
// *MachineError (a config beyond the machine: exit 3) that names the field
// by its yaml path and says where the bad value came from. The YAML is
// walked node by node so that an unknown or mistyped field is refused by
// its full path; the field list comes from Serve's yaml tags, so
// the file, the environment and --set share one name per knob.
package config
