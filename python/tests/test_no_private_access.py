"""The tests drive kvp2p through its public methods: none of them reads or
sets an attribute whose name starts with "_" (other than their own
helpers' `self._...`), nor imports such a name from kvp2p. kvp2p._pb, the
generated protobuf code, is the one private module they use, as the
package does."""

from __future__ import annotations

import ast
import os
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: str) -> list[str]:
    """Every `x._name` (x not self or cls) and every private name imported
    from kvp2p in the file at path, as "file:line: what"."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out: list[tuple[int, str]] = []
    where = os.path.basename(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            out.append((node.lineno, f"{where}:{node.lineno}: .{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "kvp2p":
            parts = [p for p in (node.module or "").split(".") if p != "_pb"]
            names = [a.name for a in node.names]
            for name in [p for p in parts if _private(p)] + [n for n in names if _private(n)]:
                out.append((node.lineno, f"{where}:{node.lineno}: {name} from {node.module}"))
    return [what for _, what in sorted(out)]


def scan(directory: str) -> list[str]:
    return [u for f in sorted(os.listdir(directory)) if f.endswith(".py")
            for u in private_uses(os.path.join(directory, f))]


def test_tests_use_no_private_members() -> None:
    uses = scan(TESTS)
    assert not uses, "tests reach into kvp2p's private members:\n" + "\n".join(uses)


def test_the_check_sees_private_uses(tmp_path: "os.PathLike[str]") -> None:
    p = os.path.join(tmp_path, "t.py")
    with open(p, "w", encoding="utf-8") as f:
        f.write("from kvp2p.client import _x, y\nfrom kvp2p._pb import engine_pb2\n"
                "core._take()\nself._ok = 1\nz.__class__\n")
    assert private_uses(p) == ["t.py:1: _x from kvp2p.client", "t.py:3: ._take"]


if __name__ == "__main__":  # the count for a tests directory: python test_no_private_access.py DIR
    found = scan(sys.argv[1] if len(sys.argv) > 1 else TESTS)
    print("\n".join(found))
    print(len(found), "private uses")
