"""Screenshot an HTML report's first screen with headless Chromium, networking off.

``python -m posenc.tools.screenshot REPORT.html OUT.png [--size 1400x900]``; used for ``docs/images/verdicts-html.png``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from posenc.tools import cli

CHROMIUM = Path("/usr/bin/chromium")
DEFAULT_SIZE = "1400,900"
TIMEOUT_S = 120


class BrowserMissing(RuntimeError):
    """No Chromium to take the screenshot with."""


def find_browser(browser: Path | None = None) -> Path:
    """``browser``, else /usr/bin/chromium, else chromium or chromium-browser on PATH."""
    on_path = [Path(found) for found in map(shutil.which, ("chromium", "chromium-browser")) if found]
    candidates = [browser] if browser else [CHROMIUM, *on_path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise BrowserMissing(f"no Chromium at {browser or CHROMIUM} (install it: apt-get install chromium); "
                         "the screenshot needs a headless browser")


def chromium_command(browser: Path, report: Path, out: Path, profile: Path, size: str = DEFAULT_SIZE) -> list[str]:
    """Headless, sandbox-free and offline: every request goes to a dead proxy, background fetches are off."""
    return [str(browser), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--proxy-server=127.0.0.1:9", "--hide-scrollbars",
            f"--window-size={size}", f"--screenshot={out}", report.resolve().as_uri()]


def screenshot(report: Path, out: Path, size: str = DEFAULT_SIZE, browser: Path | None = None) -> Path:
    """Write a PNG of ``report``'s first screen to ``out``; raises if Chromium is missing or writes nothing."""
    report, out = Path(report), Path(out).resolve()
    if not report.is_file():
        raise FileNotFoundError(f"no report at {report}")
    executable = find_browser(browser)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="posenc-chromium-") as profile:
        done = subprocess.run(chromium_command(executable, report, out, Path(profile), size), capture_output=True,
                              text=True, timeout=TIMEOUT_S)
    if not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(f"{executable} wrote no screenshot (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(prog="python -m posenc.tools.screenshot", description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the HTML file, e.g. reports/verdicts.html")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--size", default=DEFAULT_SIZE.replace(",", "x"), help="window WIDTHxHEIGHT (default 1400x900)")
    args = parser.parse_args(argv)
    try:
        written = screenshot(args.report, args.out, args.size.replace("x", ","))
    except (BrowserMissing, FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
