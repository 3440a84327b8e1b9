"""Python-executor callables for tools/bench/coordinator W1: a subject that does nothing but
return complete usage, and a verifier that gives score 1. What a cell costs here is fleet's
own overhead (dispatch, outbox, report, durable commit), nothing else."""


def noop(ctx):
    return {"usage": {"inputTokens": 0, "outputTokens": 0, "costUsd": 0.0}}


def accept(ctx, result):
    return 1.0
