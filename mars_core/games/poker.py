"""Poker: Kuhn and Leduc Hold'em on OpenSpiel, as text for one seat.

Everything a seat is shown is parsed from OpenSpiel's information-state (and observation)
string *of that seat*, never from the full state, so the opponent's private card cannot leak
into a prompt. Opponent turns are reported as the chosen action only (SPEC section 1), next to
the betting history of the hand in our action names. A seat that forfeits loses the chips it
has put into the pot (its ante included), as if it had folded.
"""
from __future__ import annotations

import re

from mars_core.games.openspiel_games import OpenSpielGame

RANKS = ("J", "Q", "K")
_ANSWER_LINE = "Answer with exactly one of them inside <answer></answer> tags."
_FIELD = re.compile(r"\[(\w+): ([^\]]*)\]")


def _who(seat: int, player: int) -> str:
    return "you" if seat == player else "opponent"


def _render_bets(actions: list[str], player: int) -> str:
    """`you <BET>, opponent <PASS>`: OpenSpiel's seat 0 opens every round, then seats alternate."""
    if not actions:
        return "none yet"
    return ", ".join(f"{_who(k % 2, player)} {a}" for k, a in enumerate(actions))


def _compact_bets(actions: list[str], player: int) -> str:
    """`you <BET>, opp <PASS>` (the compact layout's betting line)."""
    if not actions:
        return "none"
    return ", ".join(f"{'you' if k % 2 == player else 'opp'} {a}" for k, a in enumerate(actions))


class _Poker(OpenSpielGame):
    """What Kuhn and Leduc share: action names by engine id, the observation layout and the
    forfeit rule. Subclasses read their own seat view from the engine (`_view`)."""

    ACTIONS: tuple[str, ...] = ()  # our action name per OpenSpiel action id
    EXAMPLE = ""  # an action legal in every position: the reply-format example
    ROUNDS = 1  # betting rounds per hand

    def action_string(self, state, player: int, action_id: int) -> str:
        return f"<{self.ACTIONS[action_id]}>"

    def _view(self, state, player: int) -> dict:
        """The seat's view: card, public (or None), rounds (lists of action strings),
        chips (own, opponent's)."""
        raise NotImplementedError

    def forfeit_return(self, state, player: int) -> float:
        return -float(self._view(state, player)["chips"][0])

    def _situation(self, view: dict) -> list[str]:
        """Extra lines for the turn (the public card in Leduc); none by default."""
        return []

    def observation(self, state, player: int, moves_since: list[tuple[int, str]]) -> str:
        view = self._view(state, player)
        mine, theirs = view["chips"]
        lines = [f"Opponent played {a}." for _, a in moves_since]
        lines.append(f"Your private card: {view['card']}")
        lines += self._situation(view)
        for r, actions in enumerate(view["rounds"]):
            label = f"Round {r + 1} betting" if self.ROUNDS > 1 else "Betting"
            lines.append(f"{label}: {_render_bets(actions, player)}")
        owed = f" To call you must put in {theirs - mine} more." if theirs > mine else ""
        lines.append(f"Chips in the pot: you {mine}, opponent {theirs}.{owed}")
        lines += [
            "Legal actions: " + ", ".join(self.legal_actions(state)),
            _ANSWER_LINE,
        ]
        return "\n".join(lines)

    def compact_observation(self, state, player: int, moves_since: list[tuple[int, str]]) -> str:
        """The betting so far, the legal actions, then the private card last (next to the
        answer); Leduc adds the public card and the chips (its bet sizes differ by round)."""
        view = self._view(state, player)
        lines = []
        for r, actions in enumerate(view["rounds"]):
            label = f"Round {r + 1}" if self.ROUNDS > 1 else "Bets"
            lines.append(f"{label}: {_compact_bets(actions, player)}")
        lines += self._compact_situation(view)
        lines.append("Legal: " + " ".join(self.legal_actions(state)))
        lines.append(f"Your card: {view['card']}")
        return "\n".join(lines)

    def _compact_situation(self, view: dict) -> list[str]:
        return []

    def _compact_answer(self) -> str:
        return ("Answer with one legal action in answer tags, e.g. "
                f"<answer><{self.EXAMPLE}></answer>. A bad answer forfeits your chips.")

    def _reply_rules(self) -> str:
        return (
            "Reply with your reasoning if you like, then exactly one legal action inside answer "
            f"tags, for example <answer><{self.EXAMPLE}></answer>, and nothing after it. An "
            "illegal or malformed answer ends the hand and you lose the chips you have put in "
            "the pot."
        )


class KuhnPoker(_Poker):
    """Kuhn poker: OpenSpiel action 0 is Pass (check or fold), 1 is Bet (bet or call)."""

    name = "kuhn_poker"
    pyspiel_name = "kuhn_poker"
    params = {"players": 2}
    ACTIONS = ("PASS", "BET")
    EXAMPLE = "BET"

    def _view(self, state, player: int) -> dict:
        """Kuhn's information state is `<own card id><p/b per betting move>`."""
        info = state.s.information_state_string(player)
        moves = [f"<{self.ACTIONS['pb'.index(c)]}>" for c in info[1:]]
        chips = [1, 1]
        for k, m in enumerate(moves):
            chips[k % 2] += m == "<BET>"
        return {"card": RANKS[int(info[0])], "rounds": [moves],
                "chips": (chips[player], chips[1 - player])}

    def rules(self, player: int) -> str:
        order = "You act first." if player == 0 else "Your opponent acts first."
        return (
            f"You are playing Kuhn poker as player {player} against one opponent. {order}\n"
            "The deck has three cards, J < Q < K. Each player puts an ante of 1 chip into the pot "
            "and is dealt one private card that the other player cannot see; the third card is "
            "not used. There is one betting round and the only bet size is 1 chip.\n"
            "Actions: <PASS> checks when no bet is facing you, and folds when your opponent has "
            "bet (you give up the pot). <BET> puts 1 more chip into the pot: a bet when nobody "
            "has bet yet, a call when your opponent has bet.\n"
            "The hand ends when both players pass (showdown), a bet is called (showdown) or a "
            "bet is answered with a pass (fold: the bettor takes the pot). At a showdown the "
            "higher card takes the pot. Your score is the chips you win from your opponent "
            "(1 or 2), or minus the chips you lose.\n"
            + self._reply_rules()
        )


    def compact_rules(self, player: int) -> str:
        return (
            f"Kuhn poker, you are player {player} ({'first' if player == 0 else 'second'} to "
            "act). Cards J < Q < K; each player antes 1 chip and holds one card. <PASS> checks, "
            "or folds to a bet. <BET> bets 1 chip, or calls a bet. At a showdown the higher "
            "card takes the pot.\n" + self._compact_answer()
        )


class LeducPoker(_Poker):
    """Leduc Hold'em: OpenSpiel action 0 is Fold, 1 Call (or check), 2 Raise (or bet)."""

    name = "leduc_poker"
    pyspiel_name = "leduc_poker"
    ACTIONS = ("FOLD", "CALL", "RAISE")
    EXAMPLE = "CALL"
    ROUNDS = 2

    def _view(self, state, player: int) -> dict:
        """Fields of the seat's information state (`[Private: 5][Public: 3][Round1: 2 2 1]`)
        and observation (`[Ante: 5 5]`, each seat's chips in the pot). Card ids pair up by
        rank: 0-1 are J, 2-3 Q, 4-5 K."""
        fields = dict(_FIELD.findall(state.s.information_state_string(player)))
        fields.update(_FIELD.findall(state.s.observation_string(player)))
        chips = [int(x) for x in fields["Ante"].split()]
        rounds = [[f"<{self.ACTIONS[int(a)]}>" for a in fields[f"Round{r}"].split()]
                  for r in (1, 2)]
        public = RANKS[int(fields["Public"]) // 2] if "Public" in fields else None
        return {"card": RANKS[int(fields["Private"]) // 2], "public": public,
                "rounds": rounds if public else rounds[:1],
                "chips": (chips[player], chips[1 - player])}

    def _situation(self, view: dict) -> list[str]:
        if view["public"] is None:
            return ["Public card: not dealt yet (it is dealt after round 1)."]
        return [f"Public card: {view['public']}"]

    def _compact_situation(self, view: dict) -> list[str]:
        mine, theirs = view["chips"]
        return [f"Public card: {view['public'] or 'not dealt'}",
                f"Chips in: you {mine}, opp {theirs}"]

    def compact_rules(self, player: int) -> str:
        return (
            f"Leduc poker, you are player {player} ({'first' if player == 0 else 'second'} to "
            "act each round). Six cards: two each of J < Q < K. Each player antes 1 chip and "
            "holds one card; a public card is dealt after round 1. <CALL> matches (or checks), "
            "<RAISE> matches and raises 2 chips in round 1, 4 in round 2 (two raises a round at "
            "most), <FOLD> gives up. At the showdown a pair with the public card wins, else "
            "the higher card; equal ranks split.\n" + self._compact_answer()
        )

    def rules(self, player: int) -> str:
        order = "you act first" if player == 0 else "your opponent acts first"
        return (
            f"You are playing Leduc Hold'em poker as player {player} against one opponent.\n"
            "The deck has six cards: two each of J, Q and K (J < Q < K; suits play no role). "
            "Each player puts an ante of 1 chip into the pot and is dealt one private card that "
            "the other player cannot see. There are two betting rounds; after round 1 one public "
            f"card is dealt face up for both players. In each round {order}.\n"
            "Actions: <CALL> puts in the chips needed to match your opponent (a check when "
            "nothing is owed). <RAISE> matches your opponent and then adds the raise size: 2 chips "
            "in round 1, 4 chips in round 2; at most two raises per round (by both players "
            "together). <FOLD> gives up the hand and the pot to your opponent; it is only "
            "possible when your opponent has raised. Only legal actions are listed each turn.\n"
            "A round ends when both players check or a raise is called. If nobody folds, the "
            "hand ends in a showdown after round 2: a private card of the same rank as the public "
            "card (a pair) beats everything; otherwise the higher private card wins; equal ranks "
            "split the pot. Your score is the chips you win from your opponent, or minus the "
            "chips you lose.\n"
            + self._reply_rules()
        )
