"""A changelog ranks after the page that documents the same thing at equal match (``context.changelog_weight``),
unless the question asks what changed.

Through the real client on a small indexed folder (hashing embedder): the changelog names more of the question's
words than the guide that documents the behaviour, so by fusion alone it would lead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from freshindex.injection.duplicates import asks_about_changes, is_changelog
from tests.injection.ranked import first_keys


@pytest.mark.parametrize("key", ["CHANGELOG.md", "docs/changelog.md", "CHANGES.rst", "NEWS", "HISTORY.txt",
                                 "docs/release-notes.md", "releases/3.2.html", "release/3.23.html",
                                 "docs/change_log/release-2.1.md", "whatsnew/3.11.html", "whatsnew/changelog.html",
                                 "docs/releases/5.0/index.html", "changelog.d/1.bugfix.md", "doc/whats-new.rst",
                                 "change-log.md", "https://example.org/changelog?page=2"])
def test_a_changelog_or_release_note_is_known_by_its_key(key: str) -> None:
    assert is_changelog(key)


@pytest.mark.parametrize("key", ["docs/extensions/footnotes.md", "ref/settings.html", "src/structlog/processors.py",
                                 "variable/CMAKE_EXPORT_COMPILE_COMMANDS.html", "docs/newsletter.md",
                                 "topics/history-of-the-project/overview.html", "src/news/feed.py", "pyproject.toml",
                                 "src/prompt_toolkit/history.py", "lib/changes.ts", "tools/release/bump.py",
                                 "docs/news/index.md"])
def test_a_page_that_only_mentions_news_or_releases_is_no_changelog(key: str) -> None:
    assert not is_changelog(key)


def test_a_question_about_what_changed_is_told_from_one_about_how_it_works() -> None:
    for q in ("What was fixed about PyEval_EvalCodeEx() in the 3.11.2 release?", "What's new in Django?",
              "Which Python versions were added and removed in the latest release?", "What is new in 2.0?",
              "Since version 3, is the option deprecated?", "What changed between the two releases?",
              "Where are the release notes?", "Which 2.x release stopped supporting it?"):
        assert asks_about_changes(q), q
    for q in ("What CSS class is put on the title paragraph of an admonition?",
              "Which setting defines the default primary key field type for models?",
              "How do I make footnotes number by first reference?", "How do I change the default port?",
              "How do I create a new project?", "How do I release a connection back to the pool?",
              "How do I commit changes to the session?", "Is the buffer size fixed?", "Set the timeout to 0.5 seconds",
              "Why can I not connect to 127.0.0.1?", "What is the minimum Python version the package needs?"):
        assert not asks_about_changes(q), q


FILES = {"docs/jobs.md": "# Jobs\n\nA failed job is tried again, five attempts in all.\n",
         "CHANGELOG.md": "# Changelog\n\n## 2.0\n\n- The retry budget of a job: five attempts now when the job "
                         "fails.\n"}


def _keys(tmp_path: Path, question: str, **context: object) -> list[str]:
    return first_keys(tmp_path, FILES, question, **context)


def test_the_guide_leads_the_changelog_unless_the_question_asks_what_changed(tmp_path: Path) -> None:
    how = "What is the retry budget of a job that fails?"
    # Given a guide and a changelog that uses more of the question's words, weighed alike (weight 1)
    alike = _keys(tmp_path, how, changelog_weight=1.0)
    assert alike[0] == "CHANGELOG.md", alike
    # When the changelog weighs as shipped, the guide comes first and the changelog stays in the evidence
    weighed = _keys(tmp_path, how)
    assert weighed == ["docs/jobs.md", "CHANGELOG.md"], weighed
    # And a question about what changed keeps the changelog first
    changed = _keys(tmp_path, "What changed about the retry budget of a job that fails in 2.0?")
    assert changed[0] == "CHANGELOG.md", changed
