"""The module graph: no import cycle at any depth, every module importable, every registry entry real.

The graph is read statically (ast) from src/kerasrl and holds every kerasrl-internal import,
module-level and function-level alike: an import moved into a function to dodge a cycle is still a
cycle. Imports of other packages (Ray, Optuna, matplotlib, TensorFlow for export) are left out.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kerasrl
from kerasrl import presets, registry

SRC = Path(kerasrl.__file__).resolve().parent.parent
# The backends' own modules import their framework: only the running backend's are imported.
BACKEND_MODULES = {
    "jax": {"kerasrl.backend.jax"},
    "tensorflow": {"kerasrl.backend.tensorflow", "kerasrl.backend.tensorflow_fast",
                   "kerasrl.backend.saved_model"},
    "torch": {"kerasrl.backend.torch", "kerasrl.backend.torch_fast",
              "kerasrl.backend.torch_fast_rewrites"},
}


def kerasrl_modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    modules = {}
    for path in sorted((SRC / "kerasrl").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {kerasrl module it imports: line}, for imports anywhere in the file."""

    def owner(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [owner(alias.name) for alias in node.names
                           if alias.name.split(".")[0] == "kerasrl"]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                if base.split(".")[0] != "kerasrl":
                    continue
                # `from kerasrl import backend` imports the module kerasrl.backend.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules
                           else owner(base) for alias in node.names]
            else:
                continue
            for target in targets:
                if target is not None and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for target in graph[node]:
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_no_import_cycle():
    modules = kerasrl_modules()
    graph = import_graph(modules)
    cycle = find_cycle(graph)
    if cycle:
        steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:])]
        pytest.fail("Import cycle:\n  " + "\n  ".join(steps))


# A module longer than this is split by the jobs it does (each part in a module named for its job).
MAX_MODULE_LINES = 450
# Modules over the limit until they are split; an entry goes when its module is short again.
LONG_MODULES: set[str] = set()


def test_no_module_is_longer_than_max_module_lines():
    lengths = {name: len(path.read_text().splitlines()) for name, path in kerasrl_modules().items()}
    too_long = {name: n for name, n in lengths.items()
                if n > MAX_MODULE_LINES and name not in LONG_MODULES}
    assert not too_long, (f"modules over {MAX_MODULE_LINES} lines: {too_long}; split each by the "
                          f"jobs it does")
    short_again = sorted(name for name in LONG_MODULES if lengths.get(name, 0) <= MAX_MODULE_LINES)
    assert not short_again, f"remove {short_again} from LONG_MODULES: they are short now"


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1}, "b": {}, "c": {"a": 1, "b": 2}}) is None


def test_registry_is_a_leaf():
    """The registry imports nothing from kerasrl: anything may read it."""
    graph = import_graph(kerasrl_modules())
    assert graph["kerasrl.registry"] == {}


def test_the_core_never_imports_distributed_or_the_cli():
    graph = import_graph(kerasrl_modules())
    for name, edges in graph.items():
        if name.startswith(("kerasrl.distributed", "kerasrl.cli")):
            continue
        assert not [t for t in edges if t.startswith("kerasrl.distributed")], name
        assert "kerasrl.cli" not in edges, name


def test_the_package_the_envs_and_the_cli_import_without_keras():
    """`kerasrl --backend torch` settles the backend after its modules are imported: nothing they
    import at module level may import Keras (which would fix the backend first)."""
    script = ("import sys, kerasrl, kerasrl.envs, kerasrl.spaces, kerasrl.cli; "
              "print(sorted(m for m in sys.modules if m == 'keras' or m.startswith('keras.')))")
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert out.strip() == "[]", out


def test_every_module_imports_in_a_fresh_process():
    """Each module in turn, in one new interpreter; a module that needs an optional package that
    is not installed (Ray, Starlette, ...) may say so, and nothing else."""
    names = [name for name in kerasrl_modules()
             if not any(name in mods for backend_name, mods in BACKEND_MODULES.items()
                        if backend_name != kerasrl.backend.NAME)]
    script = (
        "import importlib, json, sys\n"
        "failed = {}\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError as error:\n"
        "        if (error.name or '').split('.')[0] == 'kerasrl':\n"
        "            failed[name] = repr(error)\n"
        "    except Exception as error:\n"
        "        failed[name] = repr(error)\n"
        "print(json.dumps(failed))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", script, json.dumps(names)], capture_output=True,
                            text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    failed = json.loads(result.stdout.strip().splitlines()[-1])
    assert failed == {}


@pytest.mark.parametrize("table", ["AGENTS", "CONFIGS", "POLICIES", "ENGINES", "MODEL_BUILDERS", "OPS_ENVS"])
def test_every_registry_entry_resolves(table):
    for name, entry in getattr(registry, table).items():
        obj = registry.load(entry)
        if table == "AGENTS":
            assert obj.algorithm == name
            assert obj.config_class is registry.config_class(name)
        if table == "POLICIES":
            assert obj.policy_type == name


def test_every_public_name_resolves_and_the_documented_modules_are_attributes():
    # The guides write kerasrl.callbacks.SaveBest and kerasrl.networks.nature_cnn after a bare
    # `import kerasrl`; kerasrl.callbacks was once missing from the lazy table.
    assert {"callbacks", "networks"} <= set(kerasrl.__all__)  # whatever imported them before
    for name in kerasrl.__all__:
        assert getattr(kerasrl, name) is not None, name
    assert kerasrl.callbacks.StopAtMeanReturn.__module__ == "kerasrl.callbacks"
    assert kerasrl.networks.__name__ == "kerasrl.networks"


def test_every_algorithm_has_a_compiled_loop_or_says_why_not():
    for name, algorithm in registry.ALGORITHMS.items():
        assert (algorithm.compiled is None) == bool(algorithm.not_compiled), name


def test_every_registered_env_id_is_registered_with_gymnasium():
    import gymnasium as gym

    for env_id, keywords in registry.ENV_IDS.items():
        assert gym.spec(env_id).entry_point == keywords["entry_point"]


def test_presets_name_registered_algorithms_and_models():
    for name, preset in presets.PRESETS.items():
        assert preset.algorithm in registry.AGENTS, name
        assert preset.model is None or preset.model in registry.MODEL_BUILDERS, name


def test_unknown_names_list_the_known_ones():
    with pytest.raises(KeyError, match="known: .*dqn"):
        registry.agent_class("a3c")


def _reads_of_private_agent_attributes(path: Path) -> list[str]:
    """`agent._x`, `agents[i]._x`, `x.learner._x` and `getattr(agent, "_x")` in one file: an
    engine or tool reaching into an agent (dunder names aside)."""
    def agent_like(node) -> bool:
        while isinstance(node, ast.Subscript):
            node = node.value
        if isinstance(node, ast.Name):
            return "agent" in node.id.lower()
        return isinstance(node, ast.Attribute) and node.attr in ("agent", "learner")

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and private(node.attr) and agent_like(node.value):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and agent_like(node.args[0]) and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and private(node.args[1].value)):
            found.append(f"{path.name}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_nothing_outside_the_agents_reads_an_underscored_agent_attribute(tmp_path):
    """Engines (compiled, Ray, many seeds), the CLI and tools use agents' public methods only
    (docs/architecture.md); the agents' own modules (kerasrl/agents/) may use their own."""
    outside = {name: path for name, path in kerasrl_modules().items()
               if not name.startswith("kerasrl.agents")}
    found = [hit for path in outside.values() for hit in _reads_of_private_agent_attributes(path)]
    assert not found, f"private agent attributes read outside kerasrl/agents/: {found}"
    # The check sees each form it looks for.
    planted = tmp_path / "planted.py"
    planted.write_text("agent._learn()\nagents[0]._x = 1\nself.agent.learner._state\n"
                       "getattr(agent, '_pending', 0)\nagent.__class__\nloop._vmap\n")
    assert len(_reads_of_private_agent_attributes(planted)) == 4


def test_every_module_that_registers_keras_classes_is_imported_before_a_model_loads():
    """A saved model holding one of kerasrl's own layers (CrossQ's BatchRenormalization, Snake's
    PatchConv2D) loads in a fresh process only if the module that registers it is imported first:
    registry.KERAS_LAYER_MODULES lists them, and must list every one."""
    from kerasrl import registry

    decorator = re.compile(r"^\s*@keras\.saving\.register_keras_serializable\(", re.MULTILINE)
    registering = {name for name, path in kerasrl_modules().items()
                   if decorator.search(path.read_text())}
    assert "kerasrl.layers" in registering
    assert registering <= set(registry.KERAS_LAYER_MODULES), registering - set(registry.KERAS_LAYER_MODULES)
