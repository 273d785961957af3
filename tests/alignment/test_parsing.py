from sdk.alignment import parse_choice
from sdk.alignment._parsing import is_correct, normalize_answer

OPTIONS = ("A. red", "B. green", "C. blue", "D. yellow")


def test_exact_option_parses() -> None:
    assert parse_choice("C. blue", OPTIONS) == 2
    assert parse_choice("  c.  BLUE. ", OPTIONS) == 2  # whitespace, case, one trailing period


def test_loose_answers_do_not_parse() -> None:
    for response in ("C", "C. blue and A. red", "The answer is C. blue", "blue", "", "A. red B"):
        assert parse_choice(response, OPTIONS) is None, response


def test_is_correct_uses_the_answer_not_the_position() -> None:
    assert is_correct("A. red", "A. red", OPTIONS)
    assert not is_correct("B. green", "A. red", OPTIONS)
    assert not is_correct("A red", "A. red", OPTIONS)


def test_open_question_is_exact_match() -> None:
    assert is_correct("Two circles.", "two circles", ())
    assert not is_correct("two circles and a square", "two circles", ())
    assert normalize_answer("  Two\n circles. ") == "two circles"
