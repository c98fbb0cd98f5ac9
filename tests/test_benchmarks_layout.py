"""How benchmarks/ hangs together (issue 20, "one idea, one home"): its modules import
one another without a cycle, even through imports inside functions."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def own_imports(path):
    """The benchmarks modules a file imports, at its top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("benchmarks."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("benchmarks.")}
    return out


def cycle(graph):
    """One import cycle of ``graph`` ({module: modules it imports}) as a list, else None."""
    done, path = set(), []

    def visit(m):
        if m in path:
            return path[path.index(m):] + [m]
        if m in done:
            return None
        path.append(m)
        for n in sorted(graph.get(m, ())):
            found = visit(n)
            if found:
                return found
        path.pop()
        done.add(m)
        return None

    for m in sorted(graph):
        found = visit(m)
        if found:
            return found
    return None


def test_no_import_cycle_in_benchmarks():
    graph = {p.stem: own_imports(p) for p in BENCHMARKS.glob("*.py")}
    assert graph["__main__"] >= {"batching", "report"}      # the check sees imports at all
    assert cycle(graph) is None


def test_the_check_sees_a_cycle_through_a_function():
    assert cycle({"report": {"batching"}, "batching": {"harness", "report"}, "harness": set()}) \
        == ["batching", "report", "batching"]
