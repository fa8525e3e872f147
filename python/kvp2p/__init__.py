"""kvp2p: Python client of the kvp2p engine API and vLLM tier plugin."""
