"""Shell command text split into simple commands: words, redirections, here-documents.

`shlex` splits words well but knows nothing of here-documents, of newlines as
command separators or of ``2>&1``; agents' commands are full of all three, so
this small lexer reads them itself. It never raises: an unbalanced quote takes
the rest of the text as one word, a here-document without its end line takes
the rest of the text as its body.
"""

from __future__ import annotations

import attrs

__all__ = ["Redirect", "SimpleCommand", "simple_commands"]

# Longest first, so ">>" is not read as two ">".
_OPERATORS = (
    "&>>", "<<<", "<<-", "&&", "||", ";;", "&>", ">>", ">|", ">&", "<&", "<<", "<>", "|&",
    ";", "|", "&", "(", ")", ">", "<", "\n",
)  # fmt: skip
_SEPARATORS = frozenset({"&&", "||", ";;", ";", "|", "|&", "&", "(", ")", "\n"})
_OPERATOR_START = frozenset(";&|<>()\n")
_KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!"})
_KEYWORDS |= {"{", "}", "time"}


@attrs.frozen
class _Token:
    text: str
    operator: bool = False
    literal: bool = True  # no unquoted $, backquote or glob character in it
    heredoc: bool = False  # the body of a here-document


@attrs.frozen
class Redirect:
    """One redirection of a simple command.

    Attributes:
        operator: ``>``, ``>>``, ``<``, ``<<`` (a here-document), ...
        target: The file name, the duplicated descriptor or the here-document body.
        literal: Whether ``target`` holds no expansion or glob.
    """

    operator: str
    target: str
    literal: bool


@attrs.frozen
class SimpleCommand:
    """One command of a pipeline or list: its words and redirections, in order.

    Attributes:
        words: The command name and its arguments, quotes removed; ``None``
            stands for a word with an expansion or a glob (its value is unknown).
        redirects: The redirections.
    """

    words: tuple[str | None, ...]
    redirects: tuple[Redirect, ...]


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0
        self.tokens: list[_Token] = []
        self.pending: list[tuple[int, str, bool]] = []  # token index, delimiter, strip tabs

    def run(self) -> list[_Token]:
        text = self.text
        while self.at < len(text):
            char = text[self.at]
            if char in " \t\r":
                self.at += 1
            elif char == "#":
                end = text.find("\n", self.at)
                self.at = len(text) if end < 0 else end
            elif char in _OPERATOR_START:
                self._operator()
            else:
                self._word()
        return self.tokens

    def _operator(self) -> None:
        text = self.text
        operator = next(op for op in _OPERATORS if text.startswith(op, self.at))
        self.at += len(operator)
        self.tokens.append(_Token(operator, operator=True))
        if operator == "\n":
            self._bodies()

    def _word(self) -> None:
        text, parts, literal = self.text, [], True
        while self.at < len(text):
            char = text[self.at]
            if char in " \t\r" or char in _OPERATOR_START:
                break
            if char == "'":
                end = text.find("'", self.at + 1)
                end = len(text) if end < 0 else end
                parts.append(text[self.at + 1 : end])
                self.at = end + 1
            elif char == '"':
                part, literal_part = self._double_quoted()
                parts.append(part)
                literal = literal and literal_part
            elif char == "\\":
                if text.startswith("\\\n", self.at):  # a continued line
                    self.at += 2
                    continue
                parts.append(text[self.at + 1 : self.at + 2])
                self.at += 2
            else:
                literal = literal and char not in "$`*?[~"
                parts.append(char)
                self.at += 1
        word = "".join(parts)
        last = self.tokens[-1] if self.tokens else None
        if last is not None and last.operator and last.text in ("<<", "<<-"):
            self.pending.append((len(self.tokens), word, last.text == "<<-"))
        elif word.isdigit() and self.at < len(text) and text[self.at] in "<>":
            return  # a descriptor number: "2>" redirects like ">"
        self.tokens.append(_Token(word, literal=literal))

    def _double_quoted(self) -> tuple[str, bool]:
        text, parts, literal = self.text, [], True
        self.at += 1
        while self.at < len(text) and text[self.at] != '"':
            char = text[self.at]
            if char == "\\" and text[self.at + 1 : self.at + 2] in ('"', "\\", "$", "`", "\n"):
                parts.append(text[self.at + 1 : self.at + 2].replace("\n", ""))
                self.at += 2
                continue
            literal = literal and char not in "$`"
            parts.append(char)
            self.at += 1
        self.at += 1
        return "".join(parts), literal

    def _bodies(self) -> None:
        """Read the here-documents announced on the line just ended."""
        text = self.text
        for index, delimiter, strip_tabs in self.pending:
            lines: list[str] = []
            while self.at < len(text):
                end = text.find("\n", self.at)
                end = len(text) if end < 0 else end
                line = text[self.at : end]
                self.at = end + 1
                if (line.lstrip("\t") if strip_tabs else line).rstrip() == delimiter:
                    break
                lines.append(line.lstrip("\t") if strip_tabs else line)
            body = "\n".join(lines) + ("\n" if lines else "")
            self.tokens[index] = _Token(body, heredoc=True)
        self.pending.clear()


def _simple(tokens: list[_Token]) -> SimpleCommand:
    words: list[str | None] = []
    redirects: list[Redirect] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.operator:
            target = tokens[index + 1] if index + 1 < len(tokens) else None
            if target is not None and not target.operator:
                redirects.append(Redirect(token.text, target.text, target.literal))
                index += 1
        elif not words and token.text in _KEYWORDS:
            pass
        else:
            words.append(token.text if token.literal else None)
        index += 1
    return SimpleCommand(tuple(words), tuple(redirects))


def simple_commands(text: str) -> list[SimpleCommand]:
    """The simple commands of a shell command text, in order; never raises.

    Lists (``&&``, ``||``, ``;``, newlines), pipelines and subshell parentheses
    separate commands; compound-command keywords (``if``, ``then``, ``do``,
    ...) at a command's start are dropped. A ``#`` starts a comment only where
    a word could start. A pending here-document's body is the lines after the
    line that announced it, up to its delimiter line (or the end of the text).
    """
    commands: list[SimpleCommand] = []
    current: list[_Token] = []
    for token in _Lexer(text).run():
        if token.operator and token.text in _SEPARATORS:
            if current:
                commands.append(_simple(current))
            current = []
        else:
            current.append(token)
    if current:
        commands.append(_simple(current))
    return commands
