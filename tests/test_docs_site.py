"""The built documentation site (`mkdocs build --strict` into site/), looked at in a real headless browser.

    served    = site/ on a free localhost port, by the standard library's HTTP server
    rendered  = Chromium (headless, no network, a fresh profile) loads the start page and one lesson and
                dumps the DOM its scripts leave: the start page shows the README and its picture, the
                lesson its code with the outputs of its execution (text and figures)
    links     = every internal href and src of every page of the site names a file of the site, and
                those of the two rendered pages are fetched from the server with status 200

It skips only where Chromium or the built site is absent; .ci/run installs Chromium and builds the site
first, so CI never skips it.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import threading
import urllib.request
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin, urlsplit, unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync")
"""The network is closed: nothing of Chromium's own may try to reach it."""
LESSON = "notebooks/01_policy_gradient_and_baselines/"
BROWSER_TIMEOUT_S = 120

needs_site = pytest.mark.skipif(BROWSER is None or not (SITE / "index.html").is_file(),
                                reason="needs Chromium and the built site (mkdocs build --strict); .ci/run has both")


class Links(HTMLParser):
    """The href and src values of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.found += [value for name, value in attrs if name in ("href", "src") and value]


class Outputs(HTMLParser):
    """A page's rendered cell outputs: the elements of class jp-OutputArea-output, and the images among them whose
    source is an embedded PNG (the theme's stylesheets name these classes too, so the text alone proves nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs = 0
        self.pictures = 0

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        self.outputs += "jp-OutputArea-output" in (values.get("class") or "").split()
        self.pictures += tag == "img" and (values.get("src") or "").startswith("data:image/png;base64,")


def outputs_of(html: str) -> Outputs:
    parser = Outputs()
    parser.feed(html)
    return parser


def links_of(html: str) -> list[str]:
    parser = Links()
    parser.feed(html)
    return parser.found


def internal(base: str, link: str) -> str | None:
    """The absolute address of a link that stays on the site (None for other sites, data: and mailto:)."""
    address = urljoin(base, link)
    return address.split("#", 1)[0] if urlsplit(address).netloc == urlsplit(base).netloc else None


def site_file(address: str, base: str) -> Path:
    path = unquote(urlsplit(address).path)[len(urlsplit(base).path):]
    target = SITE / path
    return target / "index.html" if path.endswith("/") or target.is_dir() else target


@pytest.fixture(scope="module")
def server():
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(SITE))
    handler.log_message = lambda *args: None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def rendered(address: str, profile: Path) -> str:
    """The DOM after Chromium has loaded the page and run its scripts."""
    result = subprocess.run([BROWSER, *BROWSER_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=5000",
                             "--dump-dom", address], capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)
    assert result.returncode == 0 and "<html" in result.stdout, result.stderr[-2000:]
    return result.stdout


def status(address: str) -> int:
    with urllib.request.urlopen(address, timeout=30) as response:
        return response.status


@needs_site
def test_the_start_page_renders_the_readme_in_a_browser(server, tmp_path):
    dom = rendered(server, tmp_path / "profile")
    assert "GRPO sorting lab" in dom and "Two commands" in dom and "--init-scale 0.1" in dom
    pictures = [link for link in links_of(dom) if link.endswith("learning_curves.png")]
    assert pictures and status(urljoin(server, pictures[0])) == 200
    assert "Command reference" in dom and "Lessons" in dom  # the navigation


@needs_site
def test_a_lesson_page_renders_with_its_outputs_in_a_browser(server, tmp_path):
    dom = rendered(urljoin(server, LESSON), tmp_path / "profile")
    outputs = outputs_of(dom)
    assert outputs.outputs > 10, "no cell outputs: the lesson was not executed at build time"
    assert outputs.pictures > 0, "no figure among the lesson's outputs"
    assert "not yet solved" in dom  # an exercise's check ran, as in a student's Run all
    assert "Traceback" not in dom


def test_the_output_counter_sees_rendered_outputs_and_not_the_stylesheets_names():
    """The rule above, on two pages: one whose stylesheet names the classes and embeds a PNG in CSS (0 outputs), one
    with a rendered output holding a figure. Runs without Chromium."""
    style = ('<html><style>.jp-OutputArea-output {margin: 0} .x {background: url(data:image/png;base64,AAAA)}'
             '</style><body><div class="jp-OutputArea">no output yet</div></body></html>')
    page = ('<html><body><div class="jp-OutputArea-output jp-RenderedImage"><img src="data:image/png;base64,AAAA">'
            '</div></body></html>')
    assert (outputs_of(style).outputs, outputs_of(style).pictures) == (0, 0)
    assert (outputs_of(page).outputs, outputs_of(page).pictures) == (1, 1)


@needs_site
def test_every_link_of_the_two_rendered_pages_answers(server, tmp_path):
    for page in (server, urljoin(server, LESSON)):
        dom = rendered(page, tmp_path / "profile")
        addresses = {a for a in (internal(page, link) for link in links_of(dom)) if a}
        assert len(addresses) > 10, page
        broken = [a for a in sorted(addresses) if status(a) != 200]
        assert broken == [], page


@needs_site
def test_every_internal_link_of_the_site_names_a_file_of_the_site():
    base = "http://site/"
    broken = []
    for page in sorted(SITE.rglob("*.html")):
        address = urljoin(base, page.relative_to(SITE).as_posix())
        for link in links_of(page.read_text(errors="replace")):
            target = internal(address, link)
            if target and not site_file(target, base).is_file():
                broken.append(f"{page.relative_to(SITE)} -> {link}")
    assert broken == []
    assert site_file(urljoin(base, "gone/"), base).name == "index.html"  # the rule itself: a folder is its index
