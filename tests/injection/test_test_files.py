"""A repository's tests rank after the code and docs they exercise at equal match (``context.test_file_weight``).

Through the real client on a small indexed folder (hashing embedder): the test names more of the question's
words than the guide that defines the behaviour, so by fusion alone it would lead.
"""

from __future__ import annotations

from pathlib import Path

from tests.injection.ranked import first_keys

QUESTION = "What is the retry budget of a job?"
FILES = {"docs/jobs.md": "# Jobs\n\nA failed job is tried again, five attempts in all.\n",
         "tests/test_jobs.md": "# Test jobs\n\nThe retry budget of a job: check it allows five attempts when the "
                               "job fails.\n"}


def _first_key(tmp_path: Path, **context: object) -> list[str]:
    return first_keys(tmp_path, FILES, QUESTION, **context)


def test_the_guide_leads_the_test_that_names_more_of_the_question(tmp_path: Path) -> None:
    # Given a guide and a test that uses more of the question's words, weighed alike (weight 1)
    alike = _first_key(tmp_path, test_file_weight=1.0)
    assert alike[0].endswith("tests/test_jobs.md"), alike
    # When the test file weighs as shipped, the guide that defines the behaviour comes first; the test stays
    shipped = _first_key(tmp_path)
    assert shipped[0].endswith("docs/jobs.md") and shipped[1].endswith("tests/test_jobs.md"), shipped
