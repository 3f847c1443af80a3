"""A real browser for the web page's tests: Debian's chromium, headless, driven by
selenium through Debian's chromedriver (never one downloaded at run time)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

T = TypeVar("T")
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


class Browser:
    """One headless chromium window (``with Browser() as b``)."""

    def __init__(self, width: int = 1440, height: int = 1000, *, offline: bool = False) -> None:
        """``offline``: every host name fails to resolve (a lab network without the
        internet): only addresses given as such, the service's 127.0.0.1, are reached."""
        missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
        if missing:
            pytest.fail(f"{', '.join(missing)} missing: run `make setup` (Debian's chromium)")
        os.environ["SE_OFFLINE"] = "true"  # selenium must not fetch a driver or browser
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in (
            "--headless=new",
            "--no-sandbox",  # tests run as root
            "--disable-dev-shm-usage",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            f"--window-size={width},{height}",
            *(["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"] if offline else []),
        ):
            options.add_argument(arg)
        self.driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.driver.quit()

    def open(self, url: str) -> None:
        self.driver.get(url)

    def login(self, token: str) -> None:
        self.wait(lambda: self.visible("#login"), "the token form")
        box = self.one("#token")
        box.clear()
        box.send_keys(token)
        self.one("#login button").click()

    def one(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def visible(self, css: str) -> bool:
        found = self.all(css)
        return bool(found) and found[0].is_displayed()

    def text(self, css: str) -> str:
        """The first match's visible text ("" if none), read in one go (the page redraws)."""
        found = self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css
        )
        return str(found)

    def attr(self, css: str, name: str) -> str | None:
        values = self.attrs(css, name)
        return values[0] if values else None

    def attrs(self, css: str, name: str) -> list[str | None]:
        """Attribute ``name`` of every match, read in one go (the page redraws)."""
        values: list[str | None] = self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])]"
            ".map((e) => e.getAttribute(arguments[1]));",
            css,
            name,
        )
        return values

    def wait(self, check: Callable[[], T], what: str, timeout: float = 15.0) -> T:
        """Until ``check()`` is truthy (and return it); fail naming ``what`` after
        ``timeout`` s, with the page's error box and the browser's console in the message."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = check()
            except StaleElementReferenceException:  # redrawn between find and read
                value = None  # type: ignore[assignment]
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the page never showed {what} in {timeout} s; error box: "
                    f"{self.text('#error')!r}; console: {self.console()}"
                )
            time.sleep(0.05)

    def console(self) -> list[str]:
        try:
            logs = self.driver.get_log("browser")
        except Exception:  # not every driver keeps the log
            return []
        return [str(entry.get("message")) for entry in logs]

    def screenshot(self, path: Path, copy_to: Path | None = None) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(path))
        if copy_to is not None:
            shutil.copyfile(path, copy_to)
        return path
