import pytest

from mars_core.games.base import INVALID_ACTION as ILLEGAL_ACTION, PARSING_FAILURE as PARSE_ERROR, parse_reply

LEGAL = {"<X(0,0)>", "<X(1,1)>", "<X(2,2)>"}


@pytest.mark.parametrize("reply", [
    "<answer><X(1,1)></answer>",
    "I take the centre. <answer><X(1,1)></answer>",
    "<think>centre is strong</think>\n<answer> <X(1,1)> </answer>\n",
    "<answer><X(1,1)></answer>   \n\t",
])
def test_legal_replies(reply):
    assert parse_reply(reply, LEGAL).action == "<X(1,1)>"


@pytest.mark.parametrize("reply", [
    "", "   ", "<X(1,1)>", "<answer><X(1,1)>", "<X(1,1)></answer>",
    "<answer><X(1,1)></answer> and then more", "<answer><X(1,1)></answer><answer><X(0,0)></answer>",
    "<answer><answer><X(1,1)></answer></answer>", "</answer><answer><X(1,1)>",
    "<think>unclosed <answer><X(1,1)></answer>", "<answer><think></think><X(1,1)></answer>",
    "</think><think><answer><X(1,1)></answer>",
    "<think>a</think><think>b</think><answer><X(1,1)></answer>",
    "<answer><X(1,1)></answer></think>",
])
def test_malformed_replies_are_parse_errors(reply):
    parsed = parse_reply(reply, LEGAL)
    assert parsed.action is None and parsed.error == PARSE_ERROR


@pytest.mark.parametrize("reply", [
    "<answer><X(0,1)></answer>", "<answer>X(1,1)</answer>", "<answer><x(1,1)></answer>",
    "<answer><O(1,1)></answer>", "<answer></answer>", "<answer><X(1,1)> <X(0,0)></answer>",
    "<answer>\u00e9\u4e2d\U0001F600</answer>",
])
def test_well_formed_but_not_legal(reply):
    parsed = parse_reply(reply, LEGAL)
    assert parsed.action is None and parsed.error == ILLEGAL_ACTION


def test_huge_and_odd_inputs_never_raise():
    assert parse_reply("x" * 1_000_000, LEGAL).error == PARSE_ERROR
    assert parse_reply("<answer>" + "<X(1,1)>" * 10_000 + "</answer>", LEGAL).error == ILLEGAL_ACTION
    assert parse_reply("\x00<answer>\x00</answer>", LEGAL).error == ILLEGAL_ACTION
    assert parse_reply(None, LEGAL).error == PARSE_ERROR  # type: ignore[arg-type]
