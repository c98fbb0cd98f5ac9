"""least_cost (token-model.md §5): the argmin of w·(ceil(P/b) − hit) + referenced blocks, the cost of placing the request (scores.score_nb), ties by the
largest hit, then the tie hash."""

from ..dtypes import Score

NAME = "least_cost"
CODE = 5
ALIASES = ()
PARAMS = ()
DRAWS = 0
RULE = "argmin"
SCORE = Score.COST
SLOW_START = True
