"""Python-executor callables for tools/bench/order: a subject that sleeps the seconds its task's
input says (the group's duration; every cell of a group sleeps the same, all start together)
and a verifier that gives score 1."""
import time


def sleep(ctx):
    time.sleep(float(ctx.task["input"]))
    return {"usage": {"inputTokens": 0, "outputTokens": 0, "costUsd": 0.0}}


def accept(ctx, result):
    return 1.0
