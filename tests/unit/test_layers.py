"""The import direction of docs/architecture.md, enforced: the core (msrl_consistent, without
its command-line modules) imports neither the algorithms nor the export package, algorithms do
not import export, and no module imports another that imports it back (directly or through a
chain), counting imports inside functions too."""
import ast
import os

from helpers import ROOT

PACKAGES = {"msrl_consistent": "msrl_consistent", "msrl_consistent.deploy": os.path.join("msrl_consistent", "deploy"),
            "msrl_consistent.networks": os.path.join("msrl_consistent", "networks"),
            "msrl_consistent.algorithms": "algorithms", "msrl_consistent.export": "export"}
APPLICATION = {"msrl_consistent.cli", "msrl_consistent.cli_train", "msrl_consistent.entry", "msrl_consistent.__main__"}


def _modules():
    mods = {}
    for pkg, folder in PACKAGES.items():
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                mod = pkg if name == "__init__.py" else f"{pkg}.{name[:-3]}"
                mods[mod] = os.path.join(ROOT, folder, name)
    return mods


def _imports(mod, path, known):
    """Package modules imported anywhere in ``path`` (function-level imports included)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    is_pkg = path.endswith("__init__.py")
    base = mod if is_pkg else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                prefix = f"{parent}.{node.module}" if node.module else parent
            else:
                prefix = node.module or ""
            names = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            while n and n not in known:
                n = n.rsplit(".", 1)[0] if "." in n else ""
            if n and n != mod:
                out.add(n)
    return out


def _graph():
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def test_core_imports_neither_algorithms_nor_export():
    graph = _graph()
    bad = []
    for mod, deps in graph.items():
        upper = [d for d in deps if d.startswith(("msrl_consistent.algorithms", "msrl_consistent.export"))]
        if mod.startswith("msrl_consistent.algorithms"):
            upper = [d for d in deps if d.startswith("msrl_consistent.export")]
        elif mod.startswith("msrl_consistent.export") or mod in APPLICATION:
            upper = []
        bad += [f"{mod} imports {d}" for d in upper]
    assert not bad, bad


def test_no_import_cycles():
    graph = _graph()
    graph = {m: {d for d in deps if d in graph and not m.startswith(d + ".")} for m, deps in graph.items()}
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, cycles


def test_the_check_sees_imports():
    # guards the two tests above against passing because the parser found nothing
    graph = _graph()
    assert "msrl_consistent.config" in graph["msrl_consistent.runtime"]
    assert "msrl_consistent.algorithms.off_policy" in graph["msrl_consistent.algorithms.sac"]
    assert "msrl_consistent.runtime" in graph["msrl_consistent.export.verify"]


def test_the_deploy_package_imports_only_the_standard_library_numpy_and_itself():
    # it ships inside every export (msrl_deploy.zip) and runs on boards with NumPy and a backend
    # library only: at module level nothing else; a backend's library is imported inside the
    # function that runs that backend
    import sys
    folder = os.path.join(ROOT, "msrl_consistent", "deploy")
    backend_libs = {"onnxruntime", "mindspore", "mindspore_lite", "ais_bench", "aclruntime"}
    bad = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(folder, name), encoding="utf-8").read())
        top = {id(n) for n in tree.body} | {id(c) for n in tree.body if isinstance(n, ast.If) for c in n.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue  # the package itself
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                roots = [a.name.split(".")[0] for a in node.names] if isinstance(node, ast.Import) \
                    else [(node.module or "").split(".")[0]]
                for r in roots:
                    ok = r in sys.stdlib_module_names or r == "numpy" or r == "__future__"
                    if not ok and not (r in backend_libs and id(node) not in top):
                        bad.append(f"{name}: import {r}")
    assert not bad, bad
