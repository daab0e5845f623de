"""Regenerate ``jdk17_sentences.json``: raw sentence segments computed by a real JDK.

Usage (needs ``javac``/``java`` 17 on PATH; not run by the test suite)::

    python tests/evaluation/data/regen_jdk_sentences.py

Each case is split by ``BreakIterator.getSentenceInstance(Locale.ROOT)`` and the *raw* pieces
between boundaries are stored, so the test checks the boundaries themselves, independent of
stripping. The inputs are ``test_sentences.py``'s golden rows plus seeded random strings over
characters whose Unicode classification is identical in JDK 17 and Python 3.11 (supplementary
combining/format characters are excluded: the JDK's supplementary table classifies some of them
oddly).
"""

from __future__ import annotations

import json
import random
import subprocess
import tempfile
from pathlib import Path

OUT = Path(__file__).with_name("jdk17_sentences.json")

JAVA = r"""
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.text.BreakIterator;
import java.util.*;

public class Split {
    public static void main(String[] a) throws Exception {
        List<String> out = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(a[0]), StandardCharsets.UTF_8)) {
            String text = unescape(line);
            BreakIterator it = BreakIterator.getSentenceInstance(Locale.ROOT);
            it.setText(text);
            List<String> segs = new ArrayList<>();
            int start = it.first();
            for (int end = it.next(); end != BreakIterator.DONE; start = end, end = it.next()) {
                segs.add(escape(text.substring(start, end)));
            }
            out.add(String.join(" ", segs));
        }
        Files.write(Paths.get(a[1]), out, StandardCharsets.UTF_8);
    }
    static String unescape(String s) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < s.length(); i += 6) {
            b.append((char) Integer.parseInt(s.substring(i + 2, i + 6), 16));
        }
        return b.toString();
    }
    static String escape(String s) {
        StringBuilder b = new StringBuilder();
        for (char c : s.toCharArray()) b.append(String.format("\\u%04x", (int) c));
        return b.toString();
    }
}
"""

GOLDEN = [
    "订单已发货。退款已经完成。",
    "好的\uff01谢谢\uff1f再见。",
    "Order 42 shipped yesterday.",
    "Hello!! Are you there?? yes.",
    "Price is 3.5 USD. ok",
    "Shipped. 42 more arrive.",
    "Dr. Smith arrived at 5 p.m. today. He left early.",
    "The U.S. Army left. Then.",
    "(Shipped.) Then.",
    "Done.\nNext line starts.",
    "line one\nline two",
    "Items:\n- first\n- second",
    "no terminal punctuation",
    "   \n\t ",
    "",
]

CHARS = [
    *'aZ1.!? ,"\'()-:$;Drx',
    "\n", "\t", "\r", "\f", "\u000b", "\u0085", "\u00a0", "\u3000", "\u2028", "\u2029",
    "\u3002", "\uff01", "\uff1f", "\uff0e", "\uff61", "\u0964", "\u0965", "\u2026",
    "\u0301", "\u200b", "\u00ad", "\ufeff", "\u061c", "\u0903", "\u00b7", "\u3001",
    "\u4e00", "\u00ab", "\u00bb", "\u201c", "\u201d", "\u2019", "\u00b2", "\u2160",
    "\u01c5", "\u02b0", "\u20dd", "\u0378", "\U0001f600", "\U0001d400", "\U0001d41a",
]  # fmt: skip

WORDS = ["Order", "42", "shipped", "Dr", "U", "S", "p", "m", "ok", "He", "订单", "已发货", "3"]
PUNCT = [
    ".",
    ".",
    "!",
    "?",
    "。",
    "\uff01",
    "\uff1f",
    "...",
    ",",
    ":",
    "(",
    ")",
    '"',
    "'",
    "«",
    "»",
    "-",
]
SPACES = [" ", " ", "  ", "\n", "\n\n", "\t", "\u00a0", ""]


def _random_chars(rng: random.Random) -> str:
    return "".join(rng.choice(CHARS) for _ in range(rng.randint(1, 12)))


def _random_words(rng: random.Random) -> str:
    pools = [WORDS, PUNCT, SPACES]
    return "".join(rng.choice(rng.choices(pools, [5, 3, 2])[0]) for _ in range(rng.randint(1, 14)))


def cases() -> list[str]:
    """Golden rows first, then 200 + 200 seeded random strings."""
    rng = random.Random(20240917)
    return [
        *GOLDEN,
        *(_random_chars(rng) for _ in range(200)),
        *(_random_words(rng) for _ in range(200)),
    ]


def _escape(text: str) -> str:
    data = text.encode("utf-16-le")
    units = (int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2))
    return "".join(f"\\u{unit:04x}" for unit in units)


def _unescape(line: str) -> list[str]:
    if not line:
        return []
    return [json.loads(f'"{segment}"') for segment in line.split(" ")]


def main() -> None:
    """Compile the oracle, split every case with the JDK and write the corpus."""
    texts = cases()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "Split.java").write_text(JAVA, encoding="utf-8")
        (work / "in.txt").write_text("\n".join(map(_escape, texts)) + "\n", encoding="utf-8")
        subprocess.run(["javac", "Split.java"], cwd=work, check=True)
        subprocess.run(["java", "-cp", ".", "Split", "in.txt", "out.txt"], cwd=work, check=True)
        lines = (work / "out.txt").read_text(encoding="utf-8").split("\n")
        version = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, check=True
        ).stderr.splitlines()[0]
    rows = [{"text": t, "segments": _unescape(line)} for t, line in zip(texts, lines, strict=False)]
    body = ",\n".join(json.dumps(row, ensure_ascii=False) for row in rows)
    header = json.dumps(version, ensure_ascii=False)
    OUT.write_text(f'{{"jdk": {header},\n"cases": [\n{body}\n]}}\n', encoding="utf-8")


if __name__ == "__main__":
    main()
