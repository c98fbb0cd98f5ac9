"""least_tokens (token-model.md §5): the argmin of τ_i + P_r + A, the outstanding tokens with the request's (scores.score_nb), ties by the
largest hit, then the tie hash."""

from ..dtypes import Score

NAME = "least_tokens"
CODE = 3
ALIASES = ()
PARAMS = ()
DRAWS = 0
RULE = "argmin"
SCORE = Score.TOKENS
SLOW_START = True
