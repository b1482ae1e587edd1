"""The docs' tables against the code: where a table in README.md or docs/*.md states behaviour (flags, config
keys, limits, monitoring endpoints, the package map), it is checked here, so a wrong or missing row fails.
One pynatsd server (with a monitoring port) serves the whole module; the rest runs in process."""

from __future__ import annotations

import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pynatsd.base.options import Options
from pynatsd.config.parser import parse
from pynatsd.config.schema import TOP_LEVEL, ConfigErrors, apply_config
from tests.servers import REPO_ROOT, ServerProcess, free_port, pynatsd_command, start_server

DOCS = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"
BACKTICKED = re.compile(r"`([^`]*)`")
CELL_BORDER = re.compile(r"(?<!\\)\|")  # a `|` not escaped as `\|` inside a cell


def cells(line: str) -> list[str]:
    return [c.strip() for c in CELL_BORDER.split(line.strip().strip("|"))]


def table(path: Path, first_header: str) -> list[list[str]]:
    """The body rows (cells stripped) of the first table in `path` headed by the cell `first_header`."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if (
            line.startswith("|")
            and cells(line)[0] == first_header
            and i + 1 < len(lines)
            and lines[i + 1].startswith("|-")
        ):
            rows = []
            for body in lines[i + 2 :]:
                if not body.startswith("|"):
                    break
                rows.append(cells(body))
            return rows
    raise AssertionError(f'{path.name}: no table headed "{first_header}"')


# -- docs/cli.md: the flags table against `pynatsd --help` ---------------------------------------------
FLAG = re.compile(r"(?<![\w<-])-{1,2}[A-Za-z]\w*")


def cli_table() -> tuple[set[str], set[str]]:
    """(flags the table describes, flags it lists as refused): every spelling in a row's first cell."""
    listed: set[str] = set()
    refused: set[str] = set()
    for first, meaning in table(DOCS / "cli.md", "flag"):
        spellings = set(FLAG.findall(first))
        assert spellings, f"cli.md: a row without a flag: {first}"
        (refused if meaning.startswith("refused") else listed).update(spellings)
    return listed, refused


def help_flags() -> set[str]:
    """Every spelling in the names column of `pynatsd --help` (names, two blanks, then the text)."""
    out = subprocess.run(
        [*pynatsd_command(), "--help"], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    names = (line.strip().split("  ")[0] for line in out.stdout.splitlines() if line.strip().startswith("-"))
    return {flag for name in names for flag in FLAG.findall(name)}


def test_cli_table_lists_exactly_the_flags_of_help() -> None:
    listed, _ = cli_table()
    shown = help_flags()
    assert shown, "no flags parsed from --help"
    assert listed - shown == set(), "in docs/cli.md but not in pynatsd --help"
    assert shown - listed == set(), "in pynatsd --help but not in docs/cli.md"


def test_cli_table_refused_flags_are_refused() -> None:
    _, refused = cli_table()
    assert refused, "docs/cli.md lists no refused flag"
    for flag in sorted(refused):
        run = subprocess.run(
            [*pynatsd_command(), flag, "1"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=30
        )
        assert run.returncode != 0, flag
        assert flag in run.stderr, run.stderr


# -- docs/configuration.md: every top-level key, its example and its status ----------------------------
def config_rows() -> list[tuple[list[str], str, str]]:
    """(aliases, example config text or "", status) per row of the top-level keys table."""
    rows = []
    for key, example, status, _ in table(DOCS / "configuration.md", "key"):
        found = BACKTICKED.findall(example)
        rows.append((BACKTICKED.findall(key), found[0] if found else "", status))
    return rows


def load(text: str) -> tuple[str, str]:
    """("refused", errors), ("ignored", warnings) or ("accepted", "") for a config text."""
    try:
        warnings = apply_config(Options(), parse(text, "docs.conf"))
    except ConfigErrors as exc:
        return "refused", str(exc)
    return ("ignored", "\n".join(warnings)) if warnings else ("accepted", "")


def test_config_table_names_every_top_level_key() -> None:
    listed = [alias for aliases, _, _ in config_rows() for alias in aliases]
    assert len(listed) == len(set(listed)), "a key listed twice"
    assert set(listed) - set(TOP_LEVEL) == set(), "in docs/configuration.md but unknown to the schema"
    assert set(TOP_LEVEL) - set(listed) == set(), "known to the schema but not in docs/configuration.md"


# Rows without an example (it would need certificate files or a JWT; the row says so) are only checked by
# the test above.
EXAMPLES = [(aliases, example, status) for aliases, example, status in config_rows() if example]


@pytest.mark.parametrize(("aliases", "example", "status"), EXAMPLES, ids=[row[0][0] for row in EXAMPLES])
def test_config_table_example_has_its_status(aliases: list[str], example: str, status: str) -> None:
    """The row's example, with each alias in place of the key it is written with, gets the row's status."""
    written = [a for a in aliases if re.search(rf"(?:^|; ){re.escape(a)}\b", example)]
    assert len(written) == 1, f"the example should use one of {aliases}: {example}"
    for alias in aliases:
        text = re.sub(rf"(^|; ){re.escape(written[0])}\b", rf"\g<1>{alias}", example, count=1)
        outcome, said = load(text)
        assert outcome == status, f"{text}: {outcome} {said}"
        if status == "refused":
            assert f'"{alias}": pynatsd does not support' in said, said
        if status == "ignored":
            assert f'"{alias}" is not supported by pynatsd and is ignored' in said, said


# -- docs/internals.md: limits and defaults against Options ---------------------------------------------
UNITS = {"": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "s": 1, "min": 60}
AMOUNT = re.compile(r"(\d+)\s*(bytes|KiB|MiB|min|s)?\b")


def amount(text: str) -> int:
    """The amount a default cell's part starts with ("64 MiB per connection": 64 MiB), in bytes or seconds."""
    found = AMOUNT.match(text.strip())
    assert found, f"no amount in {text!r}"
    return int(found[1]) * UNITS[found[2] or ""]


def test_limits_table_defaults_are_the_options_defaults() -> None:
    opts = Options()
    rows = table(DOCS / "internals.md", "limit")
    assert rows
    for names, default, _ in rows:
        keys = BACKTICKED.findall(names)
        amounts = [amount(part) for part in default.split(" / ")]
        assert len(keys) == len(amounts), names
        for key, stated in zip(keys, amounts, strict=True):
            actual = opts.effective_auth_timeout if key == "auth_timeout" else getattr(opts, key)
            assert actual == stated, f"{key}: docs say {stated}, Options has {actual}"


# -- docs/monitoring.md: every endpoint of the table answers on a running server ------------------------
def monitoring_paths() -> list[str]:
    return [p for first, _ in table(DOCS / "monitoring.md", "Path") for p in BACKTICKED.findall(first)]


@pytest.fixture(scope="module")
def monitored() -> Iterator[ServerProcess]:
    server = start_server("pynatsd", http_port=free_port())
    try:
        yield server
    finally:
        server.stop()


def get(server: ServerProcess, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}{path}", timeout=10) as response:
        return response.status, response.read().decode()


@pytest.mark.parametrize("path", monitoring_paths())
def test_monitoring_table_endpoint_answers(monitored: ServerProcess, path: str) -> None:
    status, _ = get(monitored, path)
    assert status == 200


def test_monitoring_table_has_every_endpoint_the_dashboard_links(monitored: ServerProcess) -> None:
    _, page = get(monitored, "/")
    linked = {"/" + href for href in re.findall(r'href="([a-z]+)"', page)}
    assert linked, "no endpoint links found on the dashboard"
    assert linked - set(monitoring_paths()) == set(), "linked from / but not in docs/monitoring.md"


# -- README.md: the package map against pynatsd/ -----------------------------------------------------
def actual_packages() -> set[str]:
    """`name/` for every subpackage of pynatsd, `name.py` for every module (but the package's own files)."""
    root = REPO_ROOT / "pynatsd"
    packages = {f"{p.name}/" for p in root.iterdir() if (p / "__init__.py").exists()}
    modules = {p.name for p in root.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    return packages | modules


def test_readme_code_map_names_exactly_the_packages() -> None:
    mapped = [BACKTICKED.findall(first)[0] for first, *_ in table(README, "package")]
    assert len(mapped) == len(set(mapped)), "a package mapped twice"
    assert set(mapped) == actual_packages()


# -- links between the pages --------------------------------------------------------------------------
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of the headings in `path` (outside code blocks)."""
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def links(path: Path) -> Iterator[str]:
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield from LINK.findall(line)


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    for link in links(page):
        if re.match(r"[a-z]+:", link):
            continue  # an external URL
        target, _, anchor = link.partition("#")
        resolved = (page.parent / target).resolve() if target else page
        assert resolved.exists(), f"{page.name}: {link}"
        if anchor:
            assert anchor in anchors(resolved), f"{page.name}: {link}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(README.parent / link.partition("#")[0]).resolve() for link in links(README)}
    assert {p.resolve() for p in DOCS.glob("*.md")} - linked == set()


# -- files the pages name -----------------------------------------------------------------------------
REPO_PATH = re.compile(r"(?<![\w./-])((?:pynatsd|tests|bench|docker|fuzz)/[\w./{},-]*[\w/}])")


def named_paths(text: str) -> Iterator[str]:
    """Repository paths named in `text`, `a.{json,png}` expanded, `file.py::test` cut to the file."""
    for path in REPO_PATH.findall(text):
        stem, brace, rest = path.partition("{")
        choices, _, tail = rest.partition("}")
        for choice in choices.split(",") if brace else [""]:
            yield (stem + choice + tail).split("::")[0]


def without_code_map(text: str) -> str:
    """The README less its "The code" section, which maps the target layering (checked on its own above)."""
    start = text.index("\n## The code\n")
    return text[:start] + text[text.index("\n## ", start + 1) :]


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_repository_paths_named_exist(page: Path) -> None:
    text = page.read_text()
    named = set(named_paths(without_code_map(text) if page == README else text))
    assert {p for p in named if not (REPO_ROOT / p).exists()} == set(), (
        f"named in {page.name}, not in the repository"
    )
