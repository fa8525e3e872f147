package kvp2p

// Version is kvp2p's release, the one version of the Go module, the
// `kvp2p version` command, the container image's tag and the Python
// package (python/kvp2p/__init__.py's __version__ and pyproject.toml
// carry the same string; cmd/kvp2p's TestVersionsAgree checks them).
// CHANGELOG.md says what each release holds.
const Version = "0.1.0"
