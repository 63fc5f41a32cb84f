import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    SourceLimiter,
    TokenBucket,
    default_controller_rate_limiter,
)


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_exponential_backoff_doubles_from_base_and_is_capped() -> None:
    limiter = ItemExponentialFailureRateLimiter(base_delay=0.005, max_delay=0.1)
    delays = [limiter.when("a") for _ in range(8)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08, 0.1, 0.1, 0.1])
    assert limiter.num_requeues("a") == 8


def test_exponential_backoff_is_per_item_and_reset_by_forget() -> None:
    limiter = ItemExponentialFailureRateLimiter(base_delay=1.0, max_delay=100.0)
    assert [limiter.when("a") for _ in range(3)] == [1.0, 2.0, 4.0]
    assert limiter.when("b") == 1.0
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.num_requeues("b") == 1
    assert limiter.when("a") == 1.0
    limiter.forget("never-seen")


def test_exponential_backoff_survives_failure_counts_beyond_float_range() -> None:
    limiter = ItemExponentialFailureRateLimiter(base_delay=0.005, max_delay=1000.0)
    for _ in range(2000):
        delay = limiter.when("a")
    assert delay == 1000.0


@given(
    base=st.floats(min_value=0.0, max_value=10.0),
    cap=st.floats(min_value=0.0, max_value=1e6),
    failures=st.integers(min_value=1, max_value=1100),
)
def test_exponential_backoff_is_min_of_doubling_and_cap(base: float, cap: float, failures: int) -> None:
    limiter = ItemExponentialFailureRateLimiter(base_delay=base, max_delay=cap)
    delays = [limiter.when("a") for _ in range(failures)]
    assert delays == sorted(delays)
    assert all(0.0 <= delay <= cap for delay in delays)
    if failures < 1000:
        assert delays[-1] == min(cap, base * 2.0 ** (failures - 1))


def test_bucket_allows_a_burst_then_spaces_by_qps() -> None:
    clock = FakeTime()
    limiter = BucketRateLimiter(qps=2.0, burst=3, clock=clock)
    assert [limiter.when(i) for i in range(3)] == [0.0, 0.0, 0.0]
    # Each reservation borrows one more token from the future: 0.5 s apart at 2 qps.
    assert [limiter.when(i) for i in range(3)] == pytest.approx([0.5, 1.0, 1.5])
    clock.now += 1.5
    assert limiter.when("x") == pytest.approx(0.5)


def test_bucket_refills_at_qps_up_to_burst() -> None:
    clock = FakeTime()
    limiter = BucketRateLimiter(qps=10.0, burst=5, clock=clock)
    for i in range(5):
        limiter.when(i)
    clock.now += 0.2
    assert [limiter.when(i) for i in range(3)] == pytest.approx([0.0, 0.0, 0.1])
    clock.now += 3600.0
    assert [limiter.when(i) for i in range(6)] == pytest.approx([0.0] * 5 + [0.1])


def test_bucket_keeps_no_per_item_state() -> None:
    limiter = BucketRateLimiter(qps=1.0, burst=1, clock=FakeTime())
    limiter.when("a")
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == 1.0


@pytest.mark.parametrize(("qps", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_bucket_rejects_nonsense(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match=r"qps|burst"):
        BucketRateLimiter(qps=qps, burst=burst)


def test_max_of_takes_longest_wait_and_highest_count_and_forgets_everywhere() -> None:
    clock = FakeTime()
    exponential = ItemExponentialFailureRateLimiter(base_delay=0.1, max_delay=10.0)
    bucket = BucketRateLimiter(qps=1.0, burst=2, clock=clock)
    limiter = MaxOfRateLimiter(exponential, bucket)
    assert limiter.when("a") == pytest.approx(0.1)
    assert limiter.when("a") == pytest.approx(0.2)
    assert limiter.when("a") == pytest.approx(1.0)  # the bucket is empty now
    assert limiter.num_requeues("a") == 3
    limiter.forget("a")
    assert exponential.num_requeues("a") == 0
    assert limiter.num_requeues("a") == 0


def test_max_of_nothing_never_waits() -> None:
    limiter = MaxOfRateLimiter()
    assert limiter.when("a") == 0.0
    assert limiter.num_requeues("a") == 0


def test_default_controller_rate_limiter_matches_client_go() -> None:
    limiter: RateLimiter = default_controller_rate_limiter()
    assert [limiter.when("a") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
    # 97 more distinct items exhaust the burst of 100; the next waits about 1/10 s for its token.
    for i in range(97):
        assert limiter.when(i) == pytest.approx(0.005)
    assert 0.05 < limiter.when("b") <= 0.1
    for _ in range(30):
        delay = limiter.when("a")
    assert delay == 1000.0
    assert limiter.num_requeues("a") == 33


def test_a_bucket_taken_from_refuses_when_empty_without_pushing_the_next_token_further() -> None:
    bucket = TokenBucket(rate=2.0, burst=3, now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [bucket.take(0.0) for _ in range(5)] == pytest.approx([0.5] * 5)  # refusals cost nothing
    assert bucket.take(0.25) == pytest.approx(0.25)
    assert bucket.take(0.5) == 0.0
    assert not bucket.full(0.5)
    assert bucket.full(2.0)


@given(
    rate=st.floats(0.1, 50.0),
    burst=st.integers(1, 50),
    steps=st.lists(st.tuples(st.floats(0.0, 5.0), st.integers(0, 30)), max_size=30),
)
def test_a_bucket_never_admits_more_than_its_burst_and_its_rate_allow(
    rate: float, burst: int, steps: list[tuple[float, int]]
) -> None:
    bucket, now, admitted = TokenBucket(rate=rate, burst=burst, now=0.0), 0.0, 0
    for advance, requests in steps:
        now += advance
        for _ in range(requests):
            wait = bucket.take(now)
            assert wait >= 0.0
            admitted += wait == 0.0
        assert admitted <= burst + rate * now + 1e-6


@given(rate=st.floats(0.1, 50.0), burst=st.integers(1, 50), idle=st.floats(0.0, 100.0))
def test_a_refused_request_is_told_how_long_until_one_would_be_admitted(rate: float, burst: int, idle: float) -> None:
    bucket = TokenBucket(rate=rate, burst=burst, now=0.0)
    while bucket.take(idle) == 0.0:
        pass
    wait = bucket.take(idle)
    assert bucket.take(idle + wait * 0.99) > 0.0
    assert bucket.take(idle + wait + 1e-9) == 0.0


def test_each_source_has_its_own_bucket_and_is_told_once_it_starts_being_refused() -> None:
    clock = FakeTime()
    limiter = SourceLimiter(rate=1.0, burst=2, clock=clock)
    assert [limiter.admit("a").admitted for _ in range(2)] == [True, True]
    first, again = limiter.admit("a"), limiter.admit("a")
    assert (first.admitted, first.first_refusal, again.first_refusal) == (False, True, False)
    assert first.wait == pytest.approx(1.0)
    assert limiter.admit("b").admitted  # another source
    clock.now += 1.0
    assert limiter.admit("a").admitted
    assert limiter.admit("a").first_refusal  # a new flood, a new first refusal


@given(sources=st.lists(st.integers(0, 200), max_size=300), cap=st.integers(1, 20))
def test_a_limiter_remembers_at_most_its_cap_of_sources(sources: list[int], cap: int) -> None:
    limiter = SourceLimiter(rate=1.0, burst=1, max_sources=cap, clock=FakeTime())
    for source in sources:
        limiter.admit(source)
        assert len(limiter) <= cap


def test_the_source_forgotten_is_the_one_seen_least_recently() -> None:
    limiter = SourceLimiter(rate=1.0, burst=1, max_sources=2, clock=FakeTime())
    limiter.admit("old")
    limiter.admit("busy")
    assert not limiter.admit("old").admitted  # seen again: now the most recent
    limiter.admit("new")  # one too many: "busy" goes, "old" stays refused
    assert not limiter.admit("old").admitted
    assert limiter.admit("busy").admitted  # forgotten: a full bucket, as it would have refilled


@pytest.mark.parametrize(("rate", "burst", "cap"), [(0.0, 1, 1), (float("inf"), 1, 1), (1.0, 0, 1), (1.0, 1, 0)])
def test_a_source_limiter_refuses_nonsense(rate: float, burst: int, cap: int) -> None:
    with pytest.raises(ValueError, match=r"rate|burst|max_sources"):
        SourceLimiter(rate=rate, burst=burst, max_sources=cap)
