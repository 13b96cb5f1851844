"""Varied web-like documents, seeded, for comparing the fast filters with datatrove's: every kind of
text the rules meet, and documents built to sit near each rule's threshold.

Prose over an English vocabulary (a Zipf-like draw, with contractions, abbreviations, numbers,
quotes and hyphens, and a long tail of made-up words, so that a corpus keeps bringing chunks never
seen), web pages with menus and boilerplate (cookies, javascript, policies), repeated lines,
paragraphs and phrases, code, bullet lists, URLs, e-mails, dates and prices, non-English text
(accented Latin, Cyrillic, Greek, Arabic, CJK with and without spaces), very short and very long
documents, odd whitespace (\\u2028, \\u2029, \\x85, \\x0b, \\x0c, \\r\\n, tabs, NBSP, thin and
ideographic spaces), curly brackets, lorem ipsum, ellipses, hashtags and wiki citations. Only the
seed decides the text: the same documents on every machine.
"""

from __future__ import annotations

import random

STOP = (
    "the be to of and that have with a in is it for on as was by at this from or an are not but "
    "which they you we his her"
).split()
COMMON = """time year people way day man thing woman life child world school state family student
group country problem hand part place case week company system program question work government
number night point home water room mother area money story fact month lot right study book eye job
word business issue side kind head house service friend father power hour game line end member law
car city community name president team minute idea kid body information back parent face others
level office door health person art war history party result change morning reason research girl guy
moment air teacher force education river garden window village journey kitchen music library station
letter mountain ancient quietly remember answer bright small large good new old great high different
important public early young few able late hard major better economic strong possible whole free
military true federal international full special easy clear recent certain personal open red
difficult available likely short single medical current wrong private past foreign fine common poor
natural significant similar hot dead central happy serious ready simple left physical general
environmental financial blue democratic dark various entire close legal religious cold final main
green nice huge popular traditional cultural say get make go know take see come think look want give
use find tell ask seem feel try leave call keep let begin help talk turn start show hear play run
move like live believe hold bring happen write provide sit stand lose pay meet include continue set
learn lead understand watch follow stop create speak read allow add spend grow open walk win offer
remember love consider appear buy wait serve die send expect build stay fall cut reach kill remain
suggest raise pass sell require report decide pull""".split()
EXTRA = [
    "don't",
    "it's",
    "can't",
    "I'm",
    "we're",
    "they've",
    "John's",
    "e.g.",
    "i.e.",
    "Mr.",
    "Dr.",
    "U.S.",
    "well-known",
    "state-of-the-art",
    "co-operate",
    "3.5",
    "1,000",
    "$20",
    "10%",
    "2nd",
    "5km",
    "10am",
    "(see",
    "above)",
    '"quoted"',
    "'single'",
    "—",
    "–",
    "&",
    "etc.",
    "vs.",
    "Inc.",
    "a.m.",
    "p.m.",
    "O'Neil",
    "rock'n'roll",
    "C++",
    "1990s",
    "#1",
    "@user",
    "50/50",
    "e-mail",
    "x86_64",
    "Sept.",
    "No.",
    "gonna",
    "cannot",
    "dont",
    ":)",
    "<3",
    "wasn't",
    "Ph.D.",
    "U.K.",
    "9:30",
    "£5",
    "€10",
    "°C",
    "n't",
]
LATIN = [
    "über",
    "straße",
    "größer",
    "für",
    "déjà",
    "café",
    "élève",
    "où",
    "façade",
    "niño",
    "año",
    "señor",
    "código",
    "ação",
    "São",
    "Paulo",
    "être",
    "naïve",
    "Zürich",
    "Ærø",
    "smörgåsbord",
    "łódź",
    "český",
]
CYRILLIC = [
    "привет",
    "мир",
    "это",
    "тест",
    "документ",
    "и",
    "в",
    "не",
    "на",
    "что",
    "он",
    "как",
    "слово",
]
GREEK = ["καλημέρα", "κόσμε", "και", "το", "της", "είναι", "λέξη", "δοκιμή", "ελληνικά", "ΣΟΦΟΣ"]
ARABIC = ["مرحبا", "العالم", "في", "من", "على", "هذا", "كتاب", "اللغة", "العربية"]
CJK = [
    "我们",
    "中国",
    "的",
    "是",
    "在",
    "这个",
    "文档",
    "测试",
    "日本語",
    "テスト",
    "です",
    "한국어",
    "문서",
]
WEIRD_SPACE = ["\t", "\xa0", "  ", "\u3000", "\u2009", " \t "]
WEIRD_NEWLINE = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\r\n", "\r", "\x1c", "\n\n", "\n \n"]
BOILERPLATE = [
    "Home | About | Contact",
    "Home",
    "About us",
    "Products",
    "Login",
    "Sign up",
    "Search",
    "Menu",
    "Share | Tweet | Pin",
    "Read more",
    "Read more…",
    "Read more...",
    "Click here to subscribe!",
    "This site uses cookies.",
    "This website uses cookies to improve your experience.",
    "We use cookies to give you the best experience on our website.",
    "By continuing you agree to our use of cookies and our privacy policy.",
    "Please enable JavaScript to view the comments.",
    "You need JavaScript enabled to use this site.",
    "Terms of Use | Privacy Policy | Cookie Policy",
    "© 2024 Example Corp. All rights reserved.",
    "Copyright 2019 - All Rights Reserved",
    "Posted by admin on March 3, 2021",
    "Tags: news, sports, tech",
    "Related posts:",
    "Leave a comment",
    "Subscribe to our newsletter for the latest updates.",
    "Follow us on Twitter @example",
    "#news #breaking #update",
    "Next page »",
    "« Previous",
    "Skip to main content",
    "Add to cart",
    "Price: $19.99",
    "In stock.",
    "Free shipping on orders over $50!",
]
URLS = [
    "https://www.example.com/path/to/page.html",
    "http://example.org",
    "www.google.com",
    "https://t.co/AbC123",
    "mailto:someone@example.com",
    "someone@example.com",
    "ftp://files.example.net/pub/file.tar.gz",
    "https://en.wikipedia.org/wiki/Python_(programming_language)",
    "example.com/?q=a&b=c#frag",
]
_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ren",
    "tu",
    "vas",
    "pel",
    "dor",
    "qui",
    "zan",
    "bro",
    "che",
    "fi",
    "gur",
    "ho",
    "ist",
]


class _Documents:
    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def word(self, stop_p: float = 0.4, extra_p: float = 0.05) -> str:
        r = self.r
        x = r.random()
        if x < stop_p:
            return r.choice(STOP)
        if x < stop_p + extra_p:
            return r.choice(EXTRA)
        if x < stop_p + extra_p + 0.06:  # the long tail: words a corpus has not met yet
            return "".join(r.choice(_SYLLABLES) for _ in range(r.randint(2, 4)))
        return COMMON[int(len(COMMON) * r.random() ** 2)]

    def sentence(
        self, n: tuple[int, int] = (4, 22), stop_p: float = 0.4, end: str | None = None
    ) -> str:
        r = self.r
        words = [self.word(stop_p) for _ in range(r.randint(*n))]
        for i in range(1, len(words) - 1):
            if r.random() < 0.08:
                words[i] += r.choice([",", ",", ";", ":", " -", ")", "'s"])
        if r.random() < 0.1:
            words[0] = '"' + words[0]
            words[-1] += '"'
        s = " ".join(words)
        s = s[0].upper() + s[1:]
        return s + (
            end
            if end is not None
            else r.choice([".", ".", ".", "!", "?", "", "...", "…", ":", '."', "?!", " ."])
        )

    def paragraph(self, k: tuple[int, int] = (1, 6), **kw) -> str:
        return " ".join(self.sentence(**kw) for _ in range(self.r.randint(*k)))

    def foreign(self) -> str:
        r = self.r
        language = r.choice([LATIN, CYRILLIC, GREEK, ARABIC, CJK])
        sep = "" if language is CJK and r.random() < 0.5 else " "
        lines = []
        for _ in range(r.randint(1, 12)):
            words = [
                r.choice(language) if r.random() < 0.85 else self.word()
                for _ in range(r.randint(3, 25))
            ]
            lines.append(sep.join(words) + r.choice([".", "。", "!", "?", "", "؟", "।"]))
        return "\n".join(lines)

    def document(self) -> str:
        r = self.r
        kinds = [
            (14, self.docs),
            (14, self.prose),
            (10, self.web),
            (6, self.repeated_lines),
            (4, self.repeated_phrase),
            (5, self.code),
            (5, self.bullets),
            (4, self.urls_numbers),
            (5, self.non_english),
            (5, self.short),
            (8, self.near_threshold),
            (3, self.wiki),
            (3, self.ellipses_hashes),
            (2, self.lorem_curly),
            (2, self.spam),
        ]
        x = r.uniform(0, sum(w for w, _ in kinds))
        for weight, kind in kinds:
            x -= weight
            if x <= 0:
                return self.perturbed(kind())
        return self.perturbed(self.prose())

    def perturbed(self, text: str) -> str:
        r = self.r
        x = r.random()
        if x < 0.08:  # odd newlines
            newline = r.choice(WEIRD_NEWLINE)
            parts = text.split("\n")
            text = (
                "".join(p + (newline if r.random() < 0.5 else "\n") for p in parts[:-1]) + parts[-1]
            )
        elif x < 0.16:  # odd spaces
            space = r.choice(WEIRD_SPACE)
            parts = text.split(" ")
            text = "".join(p + (space if r.random() < 0.2 else " ") for p in parts[:-1]) + parts[-1]
        elif x < 0.2:
            text = (
                r.choice([" ", "\n", "\n\n", "\t", "  \n "])
                + text
                + r.choice(["", " ", "\n", "\n\n\n", " \t"])
            )
        elif x < 0.23:
            text = text.upper()
        return text

    def docs(self) -> str:
        """Documentation-like text: sections, changelog entries, option lists, licences."""
        r = self.r
        parts = []
        for _ in range(r.randint(1, 8)):
            kind = r.randrange(4)
            if kind == 0:
                parts.append(
                    f"{r.randint(1, 9)}.{r.randint(0, 20)} {self.sentence(n=(2, 6), end='')}\n"
                    + self.paragraph()
                )
            elif kind == 1:
                parts.append(
                    f"version {r.randint(0, 9)}.{r.randint(0, 30)}.{r.randint(0, 9)} "
                    f"({r.randint(1990, 2030)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d})\n"
                    + "\n".join(f"  * {self.sentence(n=(3, 12))}" for _ in range(r.randint(1, 6)))
                )
            elif kind == 2:
                parts.append(
                    "\n".join(
                        f"--{self.word(0)}-{self.word(0)}\t{self.sentence(n=(3, 10))}"
                        for _ in range(r.randint(2, 8))
                    )
                )
            else:
                parts.append(
                    'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND. '
                    + self.paragraph()
                )
        return "\n\n".join(parts)

    def prose(self) -> str:
        separator = self.r.choice(["\n", "\n", "\n\n", " "])
        return separator.join(self.paragraph() for _ in range(self.r.randint(1, 15)))

    def web(self) -> str:
        r = self.r
        head = [r.choice(BOILERPLATE) for _ in range(r.randint(0, 8))]
        body = [self.paragraph() for _ in range(r.randint(1, 10))]
        foot = [r.choice(BOILERPLATE) for _ in range(r.randint(0, 8))]
        if r.random() < 0.3:
            body.insert(
                r.randrange(len(body) + 1),
                self.sentence(end=".")
                + " "
                + r.choice(
                    [
                        "Enable JavaScript to continue.",
                        "We use cookies.",
                        "Read our privacy policy here.",
                    ]
                ),
            )
        return "\n".join(head + body + foot)

    def repeated_lines(self) -> str:
        r = self.r
        base = [self.sentence() for _ in range(r.randint(1, 15))]
        lines = list(base)
        for _ in range(r.randint(0, 12)):
            lines.insert(r.randrange(len(lines) + 1), r.choice(base))
        return r.choice(["\n", "\n\n", "\n", "\n\n\n"]).join(lines)

    def repeated_phrase(self) -> str:
        r = self.r
        phrase = " ".join(self.word() for _ in range(r.randint(2, 12)))
        parts = [self.sentence() if r.random() < 0.6 else phrase for _ in range(r.randint(3, 30))]
        return r.choice([" ", "\n", ". "]).join(parts)

    def code(self) -> str:
        r = self.r
        lines = []
        for i in range(r.randint(2, 30)):
            lines.append(
                r.choice(
                    [
                        f"def f{i}(x):",
                        f"    return x * {i}  # times {i}",
                        "}",
                        "{",
                        f"var a{i} = {{ 'k': {i} }};",
                        f"if (x > {i}) {{ y = x; }}",
                        f"# comment {i}",
                        f"for i in range({i}):",
                        "    pass",
                        f'int main() {{ printf("%d\\n", {i}); }}',
                        f'<div class="c{i}">{self.word()}</div>',
                        f"SELECT * FROM t{i} WHERE id = {i};",
                        f"x{i} = [{i}, {i + 1}, {i + 2}]",
                        f"    self.{self.word(0)}_{i} = {self.word(0)}.get('{self.word(0)}', None)",
                    ]
                )
            )
        return "\n".join(lines)

    def bullets(self) -> str:
        r = self.r
        mark = r.choice(["- ", "• ", "* ", "1. ", "-", " - ", "· ", "○ "])
        lines = [
            mark + (self.sentence() if r.random() < 0.7 else self.word().capitalize())
            for _ in range(r.randint(2, 25))
        ]
        if r.random() < 0.5:
            lines.insert(0, self.paragraph())
        if r.random() < 0.3:
            lines.append(self.paragraph())
        return "\n".join(lines)

    def urls_numbers(self) -> str:
        r = self.r
        lines = []
        for _ in range(r.randint(2, 25)):
            x = r.random()
            if x < 0.3:
                lines.append(r.choice(URLS) + (" " + self.sentence() if r.random() < 0.5 else ""))
            elif x < 0.5:
                lines.append(
                    " ".join(
                        str(r.randint(0, 10 ** r.randint(1, 7))) for _ in range(r.randint(1, 10))
                    )
                )
            elif x < 0.65:
                lines.append(
                    f"{r.randint(1, 28)}/{r.randint(1, 12)}/{r.randint(1990, 2030)} "
                    f"{r.randint(0, 23)}:{r.randint(10, 59)} - ${r.randint(1, 999)}."
                    f"{r.randint(10, 99)}"
                )
            elif x < 0.75:
                lines.append(
                    f"Call +1 ({r.randint(200, 999)}) {r.randint(100, 999)}-"
                    f"{r.randint(1000, 9999)} or email {r.choice(URLS)}."
                )
            else:
                lines.append(self.sentence())
        return "\n".join(lines)

    def non_english(self) -> str:
        parts = [self.foreign() for _ in range(self.r.randint(1, 4))]
        if self.r.random() < 0.4:
            parts.append(self.paragraph())
        return "\n".join(parts)

    def short(self) -> str:
        r = self.r
        return r.choice(
            [
                "",
                " ",
                "\n",
                "ok",
                "Short.",
                "Buy now!",
                "the the the",
                "Hello, world!",
                self.sentence(),
                self.sentence() + "\n" + self.sentence(),
                r.choice(BOILERPLATE),
                "...",
                "#",
                "{}",
                "—",
                "Yes. No. Maybe. Why? Because!",
                "A. B. C. D. E. F.",
                "\u2028",
                "\xa0",
                "word " * r.randint(1, 60),
            ]
        )

    def near_threshold(self) -> str:
        """Documents near one rule's threshold: word counts, ratios, sentence counts."""
        r = self.r
        what = r.randrange(9)
        if what == 0:  # about 50 words
            return self.paragraph(k=(1, 1), n=(35, 70))
        if what == 1:  # few stop words
            return " ".join(
                self.sentence(stop_p=r.choice([0.0, 0.01, 0.02, 0.05]))
                for _ in range(r.randint(3, 10))
            )
        if what == 2:  # C4: about five sentences, among lines it drops
            return "\n".join(
                self.sentence(end=r.choice([".", "!", "?", "", ":", "...", ".)"]), n=(2, 12))
                for _ in range(r.randint(2, 9))
            )
        if what == 3:  # C4: few lines of several sentences, odd spaces between them
            space = r.choice([" ", "  ", "\t", "\xa0", " \u2009"])
            return "\n".join(
                space.join(
                    self.sentence(n=(3, 8), end=r.choice([".", "!", "?", ".)", "?!"]))
                    for _ in range(r.randint(1, 4))
                )
                for _ in range(r.randint(1, 3))
            )
        if what == 4:  # FineWeb: newline ratio, short lines, line punctuation
            return "\n".join(
                " ".join(self.word() for _ in range(r.randint(1, 8))) + r.choice(["", "", ".", "!"])
                for _ in range(r.randint(5, 40))
            )
        if what == 5:  # ellipsis lines near 30 %
            return "\n".join(
                self.sentence(end=r.choice(["...", "…", ".", ".", "!"]))
                for _ in range(r.randint(3, 15))
            )
        if what == 6:  # bullets near 90 %
            return "\n".join(
                ("- " if r.random() < 0.88 else "") + self.sentence()
                for _ in range(r.randint(5, 30))
            )
        if what == 7:  # long or short words
            words = r.choice(
                [
                    ["a", "I", "is", "it", "to", "of", "an", "be", "we"],
                    [
                        "internationalization",
                        "counterrevolutionaries",
                        "characteristically",
                        "the",
                        "of",
                    ],
                ]
            )
            return " ".join(r.choice(words) for _ in range(r.randint(40, 200))) + "."
        # punctuation-heavy text near the alphabetic-word ratio
        return " ".join(
            self.word()
            if r.random() < 0.78
            else r.choice(["-", "|", "123", "4.5", "(", ")", "•", "—", "2020", "#", "&"])
            for _ in range(r.randint(40, 400))
        )

    def wiki(self) -> str:
        r = self.r
        lines = []
        for _ in range(r.randint(2, 10)):
            line = self.paragraph(k=(1, 3))
            if r.random() < 0.6:
                line += r.choice(
                    ["[1]", "[23]", "[edit]", "[citation needed]", "[]", " [2]", "[note 1]"]
                )
            lines.append(line)
        if r.random() < 0.3:
            lines.insert(0, "Contents [hide]")
        return "\n".join(lines)

    def ellipses_hashes(self) -> str:
        r = self.r
        lines = []
        for _ in range(r.randint(2, 20)):
            x = r.random()
            if x < 0.3:
                lines.append(self.sentence(end=r.choice(["...", "…", "....", ". . ."])))
            elif x < 0.5:
                lines.append(" ".join("#" + self.word() for _ in range(r.randint(1, 6))))
            elif x < 0.6:
                lines.append("## " + self.sentence(end=""))
            else:
                lines.append(self.sentence())
        return "\n".join(lines)

    def lorem_curly(self) -> str:
        r = self.r
        lines = [self.sentence(end=".") for _ in range(r.randint(3, 10))]
        lines.insert(
            r.randrange(len(lines) + 1),
            r.choice(
                [
                    "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
                    "lorem ipsum",
                    "LOREM IPSUM dolor sit amet.",
                    "Use the {name} placeholder in the template.",
                    "The set {1, 2, 3} has three elements.",
                    "{",
                    "Javascript must be enabled for this page to work.",
                    "See our terms of use for details.",
                    "Lor[1]em ipsum is what the template says.",
                ]
            ),
        )
        return "\n".join(lines)

    def spam(self) -> str:
        r = self.r
        if r.random() < 0.06:  # very long: near or above Gopher's 100,000 words
            return " ".join(self.word() for _ in range(r.randint(90_000, 110_000)))
        words = [self.word() for _ in range(r.randint(1, 5))]
        return " ".join(r.choice(words) for _ in range(r.randint(20, 3000)))


def varied_documents(seed: int, count: int) -> list[str]:
    """`count` documents of every kind, drawn by `seed`."""
    documents = _Documents(seed)
    return [documents.document() for _ in range(count)]
