"""Commands the project prints ("to go on: ...", "evaluate them: ...") that run as printed, and
paths handed to Hydra's compose.

A path goes through two parsers: the shell's, then Hydra's override grammar, which stops at a space,
a parenthesis, a quote, ``#``, ``=`` in a value, ``,`` (a sweep), and reads ``${...}`` as an
interpolation. :func:`override` quotes a value for Hydra where it needs it (single quotes, ``\\'``
and ``\\\\`` escaped, ``\\${`` for a literal ``${``), and :func:`command` quotes each word for the shell.
:func:`unreadable_override` turns Hydra's lexer error about one override into one line that shows
the quoting that works.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

PLAIN = re.compile(r"[A-Za-z0-9_\-+./:@]+")  # what Hydra reads unquoted as one value


def value(text: str) -> str:
    """``text`` as Hydra reads it back unchanged: as it is where plain, else quoted (in double quotes
    where it holds a single quote and no double one, else in single quotes, escaping them)."""
    text = str(text)
    if PLAIN.fullmatch(text) and "${" not in text:
        return text
    quote = '"' if "'" in text and '"' not in text else "'"
    escaped = re.sub(rf"(\\+)(?={quote}|$)", lambda m: m.group(1) * 2, text)  # backslashes before a quote or the end
    escaped = escaped.replace(quote, "\\" + quote).replace("${", "\\${")
    return f"{quote}{escaped}{quote}"


def override(key: str, text: object) -> str:
    """``key=<value>`` for Hydra: ``hydra.run.dir='/runs/my run (2)'``."""
    return f"{key}={value(str(text))}"


def command(words: Sequence[str]) -> str:
    """``words`` as one shell line: each word quoted where the shell needs it (:func:`shell_word`)."""
    return " ".join(shell_word(word) for word in words)


def app_words(app: str, torchrun: Sequence[str] = ()) -> list[str]:
    """The words that start ``app`` (``train`` or ``eval``) the way this process's app was started:
    the checkout's ``python train.py`` (``torchrun ... train.py``), or the installed ``resnet-train``
    (``torchrun ... -m resnet.cli.train``). ``torchrun``: the launcher's words, if any."""
    if started_from_checkout():
        return [*(torchrun or ["python"]), f"{app}.py"]
    return [*torchrun, "-m", f"resnet.cli.{app}"] if torchrun else [f"resnet-{app}"]


def started_from_checkout() -> bool:
    """Whether this process's app is a checkout's ``train.py`` / ``eval.py`` rather than the
    installed ``resnet-train`` (``python -m resnet.cli.train``). Started otherwise (a test, the demo,
    ``python -c``): whether this package sits in a checkout beside its ``train.py``."""
    package = Path(__file__).resolve().parent
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    if started.name in ("train.py", "eval.py"):
        return started.resolve().parent != package / "cli"
    if started.name in ("resnet-train", "resnet-eval"):
        return False
    return (package.parent / "train.py").is_file()


def install_extra(extra: str) -> str:
    """The pip command that brings pyproject.toml's ``extra`` to this install of the project: by name
    for an installed package, editable from its folder for a checkout (``pip install -e .`` there)."""
    if started_from_checkout():
        return f"pip install -e {shell_word(f'{Path(__file__).resolve().parents[1]}[{extra}]')}"
    return f"pip install {shell_word(f'resnet-padding[{extra}]')}"


def shell_word(word: str) -> str:
    """``word`` for the shell, as readable as it can be: bare, in single quotes, or (holding single
    quotes, as a Hydra-quoted value may) in double quotes, falling back to :func:`shlex.quote`."""
    if shlex.quote(word) == word:
        return word
    if "'" not in word:
        return f"'{word}'"
    if not any(c in word for c in "$`\\!"):
        return '"' + word.replace('"', '\\"') + '"'
    return shlex.quote(word)


def unreadable_override(typed: str) -> str | None:
    """For an override Hydra cannot read (``data.root=/data/it's``): how to type it so that it
    reads, or None where it has no ``key=value`` shape."""
    key, sep, text = typed.partition("=")
    if not sep or not re.fullmatch(r"[+~]*[\w.@/\-]+", key):
        return None
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":  # quoted already: its inside is the value
        text = text[1:-1]
    return shell_word(override(key, text))
