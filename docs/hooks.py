"""MkDocs hooks: the reference pages, generated from their one source of truth.

``mkdocs build`` imports this module (``hooks:`` in ``mkdocs.yml``) and,
in :func:`on_files`, adds one generated page per fact that is kept
elsewhere, so no page is a hand-made copy that can drift:

=========================  ==============================================
page                       source
=========================  ==============================================
``reference/manifest.md``  ``schemas/pipeline.base.json``, the schema the
                           engine validates every manifest against
``reference/cli.md``       the argparse parser of ``hetflow.engine.cli``
``reference/ops.md``       the op registry, ``hetflow.executors.ops.REGISTRY``
``reference/api.md``       ``hetflow.__all__`` and the docstrings (mkdocstrings)
``benchmarks.md``          ``bench/README.md`` and ``bench/results.json``,
                           appended to the page's own introduction
=========================  ==============================================

The four reference pages are also checked in under ``docs/reference/``,
so that a link to them works where the Markdown is read (a code host, an
editor) and not only on the built site: ``python docs/hooks.py`` writes
them again, and ``tests/test_docs.py`` fails when one is not what its
source says now. ``benchmarks.md`` is appended to in the build alone
(:func:`on_page_markdown`). Each ``*_page`` function returns the Markdown
text and is usable on its own.

Examples
--------
>>> "## `hetflow run`" in cli_page()
True
>>> "### `matmul`" in ops_page()
True
>>> "`stages.NAME.op`" in manifest_page()
True
"""

from __future__ import annotations

import argparse
import importlib.resources
import inspect
import json
import re
from pathlib import Path
from typing import Any, Iterator

__all__ = ["on_files", "manifest_page", "cli_page", "ops_page", "executor_dtypes", "api_page", "benchmarks_page", "schema_keys", "cli_commands"]

ROOT = Path(__file__).resolve().parent.parent
GENERATED = "This page is generated from {source} by `python docs/hooks.py`; edit that, not this page."

#: the reference pages kept in docs/ (uri under docs/ -> the function that writes it)
PAGES = {"reference/manifest.md": "manifest_page", "reference/cli.md": "cli_page", "reference/ops.md": "ops_page",
         "reference/api.md": "api_page"}


def on_files(files, config):
    """The reference pages in the site's files (an MkDocs event): as generated now, whatever docs/ holds."""
    from mkdocs.structure.files import File

    _adopt_public_names()
    for uri, make in PAGES.items():
        checked_in = files.get_file_from_path(uri)
        if checked_in is not None:
            files.remove(checked_in)
        files.append(File.generated(config, uri, content=globals()[make]()))
    return files


def write_pages(root: Path = ROOT) -> list[Path]:
    """Write the reference pages into ``root/docs``; the paths written."""
    written = []
    for uri, make in PAGES.items():
        path = root / "docs" / uri
        path.write_text(globals()[make](), encoding="utf-8")
        written.append(path)
    return written


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Append ``bench/``'s README and results to the Benchmarks page (an MkDocs event)."""
    if page.file.src_uri == "benchmarks.md":
        return markdown.rstrip() + "\n\n" + benchmarks_page()
    return markdown


_ROLE = re.compile(r":(?:func|class|meth|attr|data|mod|exc):<code>~?([^<]+)</code>")


def on_page_content(html: str, page, config, files) -> str:
    """Turn the Sphinx roles of docstrings (``:func:`run```) into code, linked where the page has it."""
    if page.file.src_uri != "reference/api.md":
        return html

    def link(match: re.Match) -> str:
        target = match.group(1)
        anchor = "hetflow." + target.removeprefix("hetflow.")
        if f'id="{anchor}"' in html:
            return f'<a href="#{anchor}"><code>{target}</code></a>'
        return f"<code>{target}</code>"

    return _ROLE.sub(link, html)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


# --- the manifest, from the schema -------------------------------------------------------------

def _base_schema() -> dict:
    text = importlib.resources.files("hetflow.schemas").joinpath("pipeline.base.json").read_text()
    return json.loads(text)


def _resolve(node: dict, defs: dict) -> dict:
    while "$ref" in node:
        node = {**defs[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _children(node: dict, defs: dict) -> Iterator[tuple[str, dict, bool]]:
    """(segment, schema, required) of every key below ``node``: named properties, then NAME maps."""
    node = _resolve(node, defs)
    required = set(node.get("required", []))
    for name, sub in node.get("properties", {}).items():
        yield name, sub, name in required
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and ("properties" in _resolve(extra, defs) or "$ref" in extra):
        yield "NAME", extra, False


def schema_keys(schema: dict | None = None) -> list[str]:
    """Every key path of the manifest, as the reference page names it.

    Examples
    --------
    >>> keys = schema_keys()
    >>> "executors.NAME.vendor" in keys and "schedule.cron" in keys
    True
    """
    schema = _base_schema() if schema is None else schema
    defs = schema.get("$defs", {})
    keys: list[str] = []

    def walk(node: dict, prefix: str) -> None:
        for segment, sub, _required in _children(node, defs):
            path = f"{prefix}.{segment}" if prefix else segment
            if segment != "NAME":
                keys.append(path)
            walk(sub, path)

    walk(schema, "")
    return keys


def _type_text(node: dict, defs: dict) -> str:
    node_r = _resolve(node, defs)
    if "enum" in node_r:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in node_r["enum"])
    if "const" in node_r:
        return f"`{json.dumps(node_r['const'])}`"
    for combinator in ("oneOf", "anyOf"):
        if combinator in node_r and "type" not in node_r:
            return " or ".join(_type_text(branch, defs) for branch in node_r[combinator])
    kind = node_r.get("type", "any")
    kinds = kind if isinstance(kind, list) else [kind]
    text = " or ".join(kinds)
    if "array" in kinds and isinstance(node_r.get("items"), dict):
        text += " of " + _type_text(node_r["items"], defs)
    if "object" in kinds and "NAME" in {seg for seg, _s, _r in _children(node_r, defs)}:
        text = "map of NAME -> object"
    return text


def _facts(node: dict, defs: dict) -> list[str]:
    node_r = _resolve(node, defs)
    facts = []
    for key, label in (("default", "default"), ("pattern", "pattern"), ("minimum", "minimum"),
                       ("maximum", "maximum"), ("minItems", "at least (items)"), ("minProperties", "at least (keys)"),
                       ("maxLength", "longest")):
        if key in node_r:
            facts.append(f"{label}: `{json.dumps(node_r[key])}`")
    if "examples" in node_r:
        facts.append("e.g. " + ", ".join(f"`{json.dumps(v)}`" for v in node_r["examples"]))
    return facts


def manifest_page() -> str:
    """The manifest's reference: every key of ``pipeline.base.json`` with its type and description."""
    schema = _base_schema()
    defs = schema.get("$defs", {})
    out = ["# The manifest", "", "!!! info \"Generated\"",
           "    " + GENERATED.format(source="`schemas/pipeline.base.json`"), "",
           _cell(schema.get("description", "")), "",
           "`NAME` in a key path stands for a name you choose (an executor's, a stage's, ...). "
           "Names start with a letter or `_` and hold letters, digits, `_` and `-`. "
           "See [the manifest](../concepts/manifest.md) for how the pieces fit together. An *integer* is "
           "written as one: `2`, not `2.0` or `1e3`, which YAML reads as floats.", ""]

    def section(node: dict, path: str, required: bool, level: int) -> None:
        node_r = _resolve(node, defs)
        out.append(f"{'#' * level} `{path}`")
        out.append("")
        line = f"*{_type_text(node, defs)}*" + (", **required**" if required else ", optional")
        facts = _facts(node, defs)
        out.append(line + ("; " + "; ".join(facts) if facts else ""))
        out.append("")
        text = node.get("markdownDescription") or node.get("description") \
            or node_r.get("markdownDescription") or node_r.get("description")
        if text:
            out.extend([text, ""])
        for segment, sub, req in _children(node, defs):
            if segment == "NAME":
                for seg2, sub2, req2 in _children(sub, defs):
                    section(sub2, f"{path}.NAME.{seg2}", req2, min(level + 1, 4))
            else:
                section(sub, f"{path}.{segment}", req, min(level + 1, 4))

    for name, sub, req in _children(schema, defs):
        section(sub, name, req, 2)
    return "\n".join(out) + "\n"


# --- the CLI, from argparse ----------------------------------------------------------------------

def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            found.extend((name, helps.get(name, ""), sub) for name, sub in action.choices.items())
    return found


def _walk_commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ("hetflow",)):
    for name, help_text, sub in _subcommands(parser):
        yield words + (name,), help_text, sub
        yield from _walk_commands(sub, words + (name,))


def _cli_parser() -> argparse.ArgumentParser:
    from hetflow.engine import cli

    return cli._parser()


def cli_commands() -> list[str]:
    """Every command of the CLI, as typed: ``hetflow run``, ``hetflow runs show``, ...

    Examples
    --------
    >>> "hetflow schedule run-due" in cli_commands()
    True
    """
    return [" ".join(words) for words, _help, _sub in _walk_commands(_cli_parser())]


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        if action.option_strings:
            name = ", ".join(f"`{s}`" for s in action.option_strings)
            if action.nargs != 0:
                name += f" `{action.metavar or action.dest.upper()}`"
        else:
            name = f"`{action.metavar or action.dest}`"
            if action.nargs in ("+", "*"):
                name += " (one or more)" if action.nargs == "+" else " (any number)"
        notes = []
        if action.choices:
            notes.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
        if action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0:
            notes.append(f"default `{action.default}`")
        if isinstance(action, argparse._AppendAction):
            notes.append("may be repeated")
        help_text = (action.help or "").replace("%(default)s", str(action.default))
        rows.append(f"| {name} | {_cell(help_text)} | {_cell('; '.join(notes))} |")
    if not rows:
        return []
    return ["| argument | meaning | values |", "| --- | --- | --- |", *rows, ""]


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def cli_page() -> str:
    """The CLI's reference: every command and subcommand with its usage and arguments."""
    parser = _cli_parser()
    out = ["# Command line", "", "!!! info \"Generated\"",
           "    " + GENERATED.format(source="the argparse parser in `engine/cli/parser.py`"), "",
           parser.description or "", "",
           "Exit codes are listed in [Exit codes](exit-codes.md).", "",
           "## `hetflow`", "", "```", _usage(parser), "```", "", *_options_table(parser),
           "| command | does |", "| --- | --- |"]
    commands = list(_walk_commands(parser))
    for words, help_text, _sub in commands:
        anchor = "-".join(words)
        out.append(f"| [`{' '.join(words)}`](#{anchor}) | {_cell(help_text)} |")
    out.append("")
    for words, help_text, sub in commands:
        level = "#" * min(len(words), 4)
        out += [f"{level} `{' '.join(words)}` {{#{'-'.join(words)}}}", "", _cell(help_text), "",
                "```", _usage(sub), "```", "", *_options_table(sub)]
    return "\n".join(out) + "\n"


# --- ops, from the registry ----------------------------------------------------------------------

def _arity(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def executor_dtypes(op: Any) -> dict[str, list[Any]]:
    """The dtypes each executor kind computes ``op`` at: ``cpu``, ``cuda/rocm`` and ``vulkan``.

    The CPU computes every dtype an op declares; a CUDA or ROCm device
    every one cupy carries (:data:`hetflow.executors.carriers.CARRIERS`),
    where the op has a body for it; Vulkan only an op with a WGSL kernel,
    and only at the dtypes its executor supports and its rule
    (:func:`hetflow.executors.vulkan.refusal`) accepts for inputs of that
    dtype. None of it needs the device.

    >>> from hetflow.executors.ops import REGISTRY
    >>> sorted(executor_dtypes(REGISTRY["add"]))
    ['cpu', 'cuda/rocm', 'vulkan']
    >>> any(d.value == "int64" for d in executor_dtypes(REGISTRY["add"])["vulkan"])
    False
    """
    from hetflow.executors.base import Dtype
    from hetflow.executors.carriers import CARRIERS

    declared = [d for d in Dtype if d in op.dtypes]
    found = {"cpu": declared if op.runs_on("cpu") else [],
             "cuda/rocm": [d for d in declared if d in CARRIERS] if op.runs_on("cuda") else []}
    vulkan_dtypes: list[Any] = []
    if op.wgsl is not None:
        try:
            from hetflow.executors import vulkan
        except Exception:  # noqa: BLE001 - without wgpu the module may not import: then nothing is offered
            vulkan = None
        supported = getattr(vulkan, "SUPPORTED_DTYPES", ())
        refusal = getattr(vulkan, "refusal", None)
        for d in declared:
            if d not in supported:
                continue
            if refusal is not None and op.input_dtypes is None:
                try:
                    if refusal(op, [d] * op.arity[0], d, {}):
                        continue  # an op that computes on its inputs alike: the rule speaks for the dtype
                except Exception:  # noqa: BLE001 - args the rule needs and a page does not have: the dtype stands
                    pass
            vulkan_dtypes.append(d)
    found["vulkan"] = vulkan_dtypes
    return found


def _dtype_list(dtypes: list[Any], everything: list[Any]) -> str:
    if not dtypes:
        return "—"
    if dtypes == everything:
        return "all"
    return ", ".join(d.value for d in dtypes)


def ops_page() -> str:
    """The op registry's reference: every op's inputs, arguments, dtypes per executor and kernels."""
    from hetflow.executors.base import Dtype
    from hetflow.executors.ops import BUILTIN, REGISTRY

    everything = list(Dtype)
    out = ["# Ops", "", "!!! info \"Generated\"",
           "    " + GENERATED.format(source="the op registry, `hetflow.executors.ops.REGISTRY`"), "",
           "Every built-in op, as the registry declares it: the planner, `hetflow validate` and the "
           "editors' schema read the same declarations. `hetflow executors --ops` prints them on a "
           "machine, with plugin ops included. Each op computes in one compute type and converts its "
           "result to the stage's `dtype:`: float32, or float64 when an input or the output is `fp64`; "
           "an op that computes on integers takes integer and bool inputs as they are (its arithmetic "
           "wraps), and one that only moves values takes every input as it is. Floats round to nearest "
           "even; int8 and int4 round to nearest and saturate, NaN becoming 0; the integers take floats "
           "toward zero, saturating, and other integers by wrapping; bool is `value != 0` "
           "(see [Dtypes and portable bytes](dtypes.md)). A stage without `dtype:` gets fp32 unless its "
           "op or its inputs make it another. The dtype columns say where each op runs at each dtype: "
           "the planner keeps a stage off an executor that does not run its op at its dtype, or cannot "
           "import its inputs' dtypes. To add your own, see [Write your own op](../how-to/custom-op.md).", "",
           "| op | inputs | args | cpu | cuda/rocm | vulkan | does |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    builtin = {name: op for name, op in REGISTRY.items() if name in BUILTIN}  # users' ops are documented by their plugins
    per_executor = {name: executor_dtypes(op) for name, op in builtin.items()}
    for name, op in builtin.items():
        args = ", ".join(f"`{a}`" for a in op.args) or ""
        cells = " | ".join(_dtype_list(per_executor[name][k], everything) for k in ("cpu", "cuda/rocm", "vulkan"))
        out.append(f"| [`{name}`](#{'op-' + name.replace('.', '-')}) | {_arity(*op.arity)} | {args} | {cells} | "
                   f"{_cell(op.doc)} |")
    out += ["", "In the dtype columns, *all* is every one of the thirteen dtypes; — is none.", ""]
    for name, op in builtin.items():
        out += [f"### `{name}` {{#{'op-' + name.replace('.', '-')}}}", "", _cell(op.doc) + ".", "",
                f"- **inputs**: {_arity(*op.arity)}",
                "- **dtypes**: " + ", ".join(f"`{d.value}`" for d in everything if d in op.dtypes)]
        for kind, dtypes in per_executor[name].items():
            out.append(f"    - on **{kind}**: " + (", ".join(f"`{d.value}`" for d in dtypes) if dtypes else "not offered"))
        if op.moves:
            out.append("- **computes**: moves or selects values: its inputs reach it as they are, at any dtype")
        elif op.exact:
            out.append("- **computes**: on integer and bool inputs as they are (arithmetic wraps); "
                       "on others in float32, float64 with fp64")
        vendors = sorted(op.kernels)
        if op.wgsl is not None:
            vendors.append("vulkan (WGSL)" if op.wgsl.template != "host" else "vulkan (made on the host)")
        out.append("- **own kernels**: " + (", ".join(vendors) if vendors else
                                            "none: the generic body runs on cpu, cuda and rocm"))
        if op.args:
            out += ["", "| arg | kind | required | default | meaning |", "| --- | --- | --- | --- | --- |"]
            for arg_name, arg in op.args.items():
                default = "" if arg.required else f"`{json.dumps(arg.default)}`"
                out.append(f"| `{arg_name}` | {arg.kind} | {'yes' if arg.required else 'no'} | {default} | "
                           f"{_cell(arg.doc)} |")
        out.append("")
    return "\n".join(out) + "\n"


# --- the Python API, from hetflow.__all__ and the docstrings --------------------------------

def _adopt_public_names() -> None:
    """Document every public name as a member of ``hetflow``, where users import it from.

    griffe cannot follow ``hetflow.engine`` to its folder (setup.py maps ``engine/`` onto it), so
    a re-exported name is rendered only when, in this build process, its ``__module__`` says
    ``hetflow``: the same thing ``hetflow/__init__.py`` does for the names it defines.
    """
    import hetflow

    for name in hetflow.__all__:
        value = getattr(hetflow, name)
        if not name.startswith("_") and getattr(value, "__module__", "hetflow") != "hetflow":
            value.__module__ = "hetflow"


class TypeDocstrings:
    """A griffe extension: an attribute inspected at run time has no docstring of its own.

    Inspection reads ``inspect.getdoc(value)``, which for ``status = "failed"`` is the docstring
    of ``str``; this drops such docstrings, so the attribute shows its value alone.
    """

    def __new__(cls):
        import griffe

        class _Extension(griffe.Extension):
            def on_attribute_instance(self, *, node, attr, **kwargs) -> None:
                value = getattr(node, "obj", None)
                type_doc = getattr(type(value), "__doc__", None)
                if attr.docstring is not None and isinstance(type_doc, str) \
                        and attr.docstring.value == inspect.cleandoc(type_doc):
                    attr.docstring = None

        return _Extension()


def api_page() -> str:
    """The Python API: one mkdocstrings block for the public names of ``import hetflow``, in ``__all__`` order."""
    import hetflow

    members = [name for name in hetflow.__all__ if not name.startswith("_")]
    return "\n".join([
        "# Python API", "",
        "!!! info \"Generated\"",
        "    " + GENERATED.format(source="`hetflow.__all__` and the docstrings of its names"), "",
        "`import hetflow` is the same engine as the CLI; [Use from Python](../how-to/python.md) walks "
        "through it. The version is `hetflow.__version__`.", "",
        "::: hetflow",
        "    options:",
        "      force_inspection: true",
        "      extensions: [docs/hooks.py:TypeDocstrings]",
        "      show_root_heading: false",
        "      show_root_toc_entry: false",
        "      heading_level: 2",
        "      filters: [\"!^_\"]",
        "      members_order: __all__",
        "      group_by_category: false",
        "      members:",
        *[f"        - {name}" for name in members], "",
        *_emulator_api(),
    ])


def _emulator_api() -> list[str]:
    """The emulator's public callables and classes (``hetflow.executors.emulator.__all__``), each with its
    signature and the first paragraph of its docstring, written here rather than by mkdocstrings (which
    finds ``hetflow`` but not the packages the install maps under it)."""
    from hetflow.executors import emulator

    out = ["## The emulator: `hetflow.executors.emulator`", "",
           "`execute()` runs a RISC-V guest and returns its `ExecutionOutput`; the other names replay, check and "
           "tabulate what it left. [The emulator reference](emulator.md) says what each output and table holds.", ""]
    for name in emulator.__all__:
        obj = getattr(emulator, name, None)
        if not callable(obj) or inspect.ismodule(obj):
            continue  # the memory map's constants and the machine module: named in the emulator reference
        try:
            # a default that is a module prints where it is installed: its name alone is the same everywhere
            signature = re.sub(r"<module '([\w.]+)' from '[^']*'>", r"\1", str(inspect.signature(obj)))
        except (TypeError, ValueError):
            signature = "(...)"
        kind = "class" if inspect.isclass(obj) else "function"
        doc = inspect.getdoc(obj) or ""
        first = doc.split("\n\n", 1)[0].strip() if doc else "(undocumented)"
        out += [f"### `{name}`", "", f"{kind} `{name}{signature}`" if kind == "function" else
                f"class `{name}{signature}`", "", first, ""]
    return out


# --- benchmarks, from bench/ -----------------------------------------------------------------

def _demote(markdown: str) -> str:
    """Every heading one level down (``#`` lines inside code fences are not headings)."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        lines.append("#" + line if not fenced and re.match(r"#+ ", line) else line)
    return "\n".join(lines) + "\n"


def benchmarks_page() -> str:
    """``bench/README.md`` (its headings one level down) and every row of ``bench/results.json``."""
    readme = re.sub(r"\A## Benchmarks\n", "## `bench/README.md`\n",
                    _demote((ROOT / "bench" / "README.md").read_text()))
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    machine = results.get("machine", {})
    out = [readme.rstrip(), "", "### Every row of `results.json`", "",
           "!!! info \"Generated\"", "    " + GENERATED.format(source="`bench/README.md` and `bench/results.json`"), "",
           f"Written {results.get('created', '?')} on {machine.get('cpus', '?')} CPUs, Python "
           f"{machine.get('python', '?')}, {machine.get('platform', '?')}; per module, when its rows were measured: "
           + ", ".join(f"`{m}` {r.get('created', '?')}" + (" (quick)" if r.get("quick") else "")
                       for m, r in sorted(results.get("runs", {}).items())) + ".", "",
           "| module | benchmark | baseline | baseline s | subject | subject s | ratio | notes |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def num(value: Any, fmt: str) -> str:
        return "" if value is None else format(value, fmt)

    for row in results.get("rows", []):
        ratio = num(row.get("ratio"), ".2f")
        out.append(f"| {row.get('module', '').removeprefix('bench_')} | {_cell(row.get('name', ''))} | "
                   f"{_cell(row.get('baseline', ''))} | {num(row.get('baseline_s'), '.4f')} | "
                   f"{_cell(row.get('subject', ''))} | {num(row.get('subject_s'), '.4f')} | "
                   f"{ratio + 'x' if ratio else ''} | {_cell(row.get('notes', ''))} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    for written in write_pages():
        print(written.relative_to(ROOT))
