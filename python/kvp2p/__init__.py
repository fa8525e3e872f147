"""kvp2p: Python client of the kvp2p engine API and vLLM tier plugin."""

# The one version of Go and Python (kvp2p.Version in version.go; checked by
# cmd/kvp2p TestVersionsAgree).
__version__ = "0.1.0"
