"""least_kv (token-model.md §5): the argmin of the referenced share of the KV pool (scores.score_nb), ties by the
largest hit, then the tie hash."""

from ..dtypes import Score

NAME = "least_kv"
CODE = 4
ALIASES = ()
PARAMS = ()
DRAWS = 0
RULE = "argmin"
SCORE = Score.KV
SLOW_START = True
