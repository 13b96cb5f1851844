"""datatrove's `PIIFormatter`: e-mail addresses and public IP addresses replaced in the text a
document is kept with, by its patterns, replacements and defaults.

datatrove hands out each kind's replacements in turn, a counter that runs on across every document
its formatter saw; here it starts afresh with each document, so a document's text depends on the
document alone, whatever the units, workers or documents before it (the text datatrove's formatter
gives when made for that document). The replacements made are noted per document (`emails`,
`ips`).
"""

from __future__ import annotations

import dataclasses
import functools
import re

from pipeline.prepare.clean.judgments import Judged

# datatrove's IP pattern: four octets of one to three digits, joined by dots. Each of its matches
# starts with a digit and holds a digit, a dot and a digit, so a text without that has no match,
# and a lookahead for a digit lets Python's engine skip to the digits: on web text the check runs
# at about 210 MB/s and the pattern with the lookahead at 95, the pattern alone at 25. Another
# pattern, from another datatrove, is used as it is.
_OCTET = "(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)"
_KNOWN_IP_PATTERN = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_IP_CANDIDATE = re.compile(r"[0-9]\.[0-9]")


@functools.cache
def _formatter_module():
    from datatrove.pipeline.formatters import pii

    return pii


def _replacements(value: tuple[str, ...] | list[str] | str) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@dataclasses.dataclass
class PIIRule:
    """datatrove's keyword arguments and defaults."""

    # A rule of the chain over whole texts, whose words it does not need (see `fast_filters`).
    web = True
    needs_words = False

    remove_emails: bool = True
    remove_ips: bool = True
    only_remove_public_ips: bool = True
    email_replacement: tuple[str, ...] | list[str] | str = (
        "email@example.com",
        "firstname.lastname@example.org",
    )
    ip_replacement: tuple[str, ...] | list[str] | str = (
        "22.214.171.124",
        "126.96.36.199",
        "188.8.131.52",
        "184.108.40.206",
        "220.127.116.11",
        "18.104.22.168",
    )

    def __post_init__(self) -> None:
        pii = _formatter_module()
        # datatrove's own patterns and validator, read from a formatter it builds.
        made = pii.PIIFormatter()
        self._emails = made.emails_replacer.regex
        self._ips = made.ip_replacer.regex
        self._ip_candidate: re.Pattern | None = None
        if self._ips.pattern == _KNOWN_IP_PATTERN:
            self._ips = re.compile("(?=[0-9])" + self._ips.pattern, self._ips.flags)
            self._ip_candidate = _IP_CANDIDATE
        self._public_only = self.only_remove_public_ips
        self._email_with = _replacements(self.email_replacement)
        self._ip_with = _replacements(self.ip_replacement)
        self._valid_ip = pii.public_ip_validator

    def use(self, language_model: str | None) -> None:
        """Nothing to load: the patterns are datatrove's, compiled when built."""

    @staticmethod
    def _replace(
        text: str, pattern: re.Pattern, replacements: tuple[str, ...], valid
    ) -> tuple[str, int]:
        """datatrove's `PIIReplacer.replace`, the turns starting at the text's first match."""
        made = 0

        def replacement(match: re.Match) -> str:
            nonlocal made
            if valid is not None and not valid(match.group(0)):
                return match.group(0)
            made += 1
            return replacements[(made - 1) % len(replacements)]

        return pattern.sub(replacement, text), made

    def check(self, text: str) -> None:
        self.judge([text])

    def judge(self, texts: list[str]) -> list[Judged]:
        """Every text kept, with its replacements made."""
        valid = functools.partial(self._valid_ip, public_only=self._public_only)
        judged = []
        for text in texts:
            notes = {}
            if self.remove_emails and "@" in text:  # the pattern has one
                text, notes["emails"] = self._replace(text, self._emails, self._email_with, None)
            if self.remove_ips and (self._ip_candidate is None or self._ip_candidate.search(text)):
                text, notes["ips"] = self._replace(text, self._ips, self._ip_with, valid)
            judged.append(Judged(True, text, {k: n for k, n in notes.items() if n}))
        return judged
