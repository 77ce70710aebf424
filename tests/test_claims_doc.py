"""docs/claims.md against tests/proofs/: every claim listed, linked to proofs that exist, nothing left out.

    section  = "## Claim N. title" ... up to the next level-2 heading
    a link   = a relative markdown link [text](path); it must name an existing file
    a cite   = a `test_...` name in backticks; it must be defined in a .py file its section links
    coverage = every tests/proofs/test_*.py linked; every test_claim_NN_* function cited under claim NN
    files    = one proof file per claim, tests/proofs/test_claim_NN_<short_name>.py, linked from claim NN's
               section, and every test in it named test_claim_NN_ (the same NN)
    summary  = docs/proofs.md points to claims.md, and its summary bullets ("- 1-5: ...", "- 11-13: ...")
               cover claims 1..N in order, N the number of claims here; the README links docs/claims.md

Each rule is a function returning the problems it finds, so the same rules are run on the real
page (no problems) and on broken copies of it (the mutants: each must be caught).
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "claims.md"
README = ROOT / "README.md"
SUMMARY = ROOT / "docs" / "proofs.md"
PROOFS = ROOT / "tests" / "proofs"

HEADING = re.compile(r"^## Claim (\d+)\. \S", re.MULTILINE)
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
CITE = re.compile(r"`(test_\w+)`")
FIELDS = ("**Statement.**", "**Source.**", "**Proof.**")
FIRST_CLAIMS = 17
"""Claims 1-17 are the lab's first set; later work adds claims after them."""


def claim_sections(text: str) -> dict[int, str]:
    """claim number -> its section's text, from its heading to the next level-2 heading."""
    starts = list(re.finditer(r"^## ", text, flags=re.MULTILINE)) + [None]
    sections = {}
    for start, end in zip(starts, starts[1:]):
        body = text[start.start():end.start() if end else len(text)]
        match = HEADING.match(body)
        if match:
            sections[int(match.group(1))] = body
    return sections


def local_links(text: str) -> list[Path]:
    """Relative link targets (web addresses left out), resolved from docs/."""
    return [(DOC.parent / t).resolve() for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def defined_tests(path: Path) -> set[str]:
    """Names of the module-level test functions of a Python file (none if it does not exist)."""
    if path.suffix != ".py" or not path.is_file():
        return set()
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def numbering_problems(text: str) -> list[str]:
    numbers = [int(n) for n in HEADING.findall(text)]
    if numbers != list(range(1, len(numbers) + 1)):
        return [f"claims are numbered {numbers}, not 1..{len(numbers)} in order"]
    return [] if len(numbers) >= FIRST_CLAIMS else [f"only {len(numbers)} claims, fewer than {FIRST_CLAIMS}"]


def section_problems(text: str) -> list[str]:
    problems = []
    for number, body in claim_sections(text).items():
        problems += [f"claim {number} lacks {field}" for field in FIELDS if field not in body]
        if not any(path.parent == PROOFS for path in local_links(body)):
            problems.append(f"claim {number} links no file in tests/proofs/")
        proof = body.split("**Proof.**", 1)[-1]
        if not CITE.search(proof):
            problems.append(f"claim {number} names no test function")
    return problems


def link_problems(text: str) -> list[str]:
    return [f"{path.relative_to(ROOT)} is linked but does not exist" for path in local_links(text) if not path.exists()]


def citation_problems(text: str) -> list[str]:
    problems = []
    for number, body in claim_sections(text).items():
        defined = set().union(*(defined_tests(path) for path in local_links(body)))
        problems += [f"claim {number} cites {name}, defined in no file it links"
                     for name in CITE.findall(body) if name not in defined]
    return problems


def coverage_problems(text: str) -> list[str]:
    problems, linked, sections = [], set(local_links(text)), claim_sections(text)
    for path in sorted(PROOFS.glob("test_*.py")):
        if path.resolve() not in linked:
            problems.append(f"{path.name} is not linked from docs/claims.md")
        for name in sorted(defined_tests(path)):
            match = re.match(r"test_claim_(\d+)_", name)
            if not match:
                problems.append(f"{path.name}: {name} does not say which claim it proves (test_claim_NN_...)")
            elif name not in CITE.findall(sections.get(int(match.group(1)), "")):
                problems.append(f"{name} is not cited under claim {int(match.group(1))}")
    return problems


PROOF_FILE = re.compile(r"test_claim_(\d\d)_[a-z0-9_]+\.py")


def proof_file_problems(text: str) -> list[str]:
    """One file per claim, named after it, linked from its section, holding only its tests."""
    problems, sections, files = [], claim_sections(text), {}
    for path in sorted(PROOFS.glob("test_*.py")):
        match = PROOF_FILE.fullmatch(path.name)
        if not match:
            problems.append(f"{path.name} is not named test_claim_NN_<short_name>.py")
            continue
        number = int(match.group(1))
        files.setdefault(number, []).append(path)
        if path.resolve() not in local_links(sections.get(number, "")):
            problems.append(f"{path.name} is not linked from claim {number}'s section")
        others = sorted(name for name in defined_tests(path) if not name.startswith(f"test_claim_{match.group(1)}_"))
        problems += [f"{path.name} holds {name}, not a test of claim {number}" for name in others]
    for number in sections:
        if len(files.get(number, [])) != 1:
            problems.append(f"claim {number} has {len(files.get(number, []))} proof files, not one")
    return problems


def summary_problems(summary: str, claims: int) -> list[str]:
    problems = [] if "](claims.md)" in summary else ["docs/proofs.md does not link claims.md"]
    covered = []
    for first, last in re.findall(r"^- (\d+)(?:-(\d+))?: ", summary, flags=re.MULTILINE):
        covered += range(int(first), int(last or first) + 1)
    if covered != list(range(1, claims + 1)):
        problems.append(f"docs/proofs.md's list covers claims {covered}, docs/claims.md has 1..{claims}")
    return problems


def readme_problems(readme: str) -> list[str]:
    return [] if "](docs/claims.md)" in readme else ["README does not link docs/claims.md"]


def test_claims_are_numbered_consecutively_from_one():
    assert numbering_problems(DOC.read_text()) == []


def test_every_claim_has_a_statement_a_source_and_a_proof_in_tests_proofs():
    assert section_problems(DOC.read_text()) == []


def test_every_local_link_names_an_existing_file():
    assert link_problems(DOC.read_text()) == []


def test_every_cited_test_is_defined_in_a_file_its_section_links():
    assert citation_problems(DOC.read_text()) == []


def test_every_proof_file_is_linked_and_every_claim_test_is_cited_under_its_claim():
    assert coverage_problems(DOC.read_text()) == []


def test_each_claim_has_one_proof_file_named_after_it():
    assert proof_file_problems(DOC.read_text()) == []


def test_the_proofs_page_summarises_every_claim_and_the_readme_points_to_them():
    assert summary_problems(SUMMARY.read_text(), len(claim_sections(DOC.read_text()))) == []
    assert readme_problems(README.read_text()) == []


def test_each_rule_catches_its_mutant():
    """Broken copies of the page: a gap in the numbering, a section without a source, a link to a
    file that is gone, a test name that does not exist, a proof file no longer linked, a claim whose
    section links another claim's proof file instead of its own."""
    text = DOC.read_text()
    mutants = {
        numbering_problems: text.replace("## Claim 2. ", "## Claim 3. ", 1),
        section_problems: text.replace("**Source.** Schulman, \"Approximating KL Divergence\" (2020): ", "", 1),
        link_problems: text.replace("../tests/proofs/test_claim_17_difficulty_bias.py)",
                                    "../tests/proofs/test_claim_17_gone.py)"),
        citation_problems: text.replace("`test_claim_03_leave_one_out_baseline_is_unbiased`", "`test_claim_03_gone`"),
        coverage_problems: text.replace("(../tests/proofs/test_claim_14_kl_gradients.py)", "(../tests/core/test_kl.py)"),
        proof_file_problems: text.replace("(../tests/proofs/test_claim_16_fixed_length_normalisers.py)",
                                          "(../tests/proofs/test_claim_15_clipped_lower_bound.py)"),
    }
    for rule, mutant in mutants.items():
        assert mutant != text, rule.__name__
        assert rule(mutant), f"{rule.__name__} misses its mutant"
    summary, claims = SUMMARY.read_text(), len(claim_sections(text))
    assert summary_problems(summary, claims + 1)  # a claim added here but not summarised there
    assert summary_problems(summary.replace("](claims.md)", "](other.md)"), claims)
    assert readme_problems(README.read_text().replace("](docs/claims.md)", "](docs/other.md)"))
