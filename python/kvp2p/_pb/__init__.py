"""Generated gRPC code of the engine API (scripts/gen-proto-py.sh). Do not edit."""
