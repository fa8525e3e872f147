// Package scenarios holds kvp2p's built-in scenario files (docs/design.md §7),
// one YAML file per scenario, named after the scenario. It exists only to
// embed them: go:embed cannot reach outside its package's directory, and
// the files belong at the top of the repository where people look for
// them. Load them through internal/scenario (Builtins, Load, LoadAll).
package scenarios
