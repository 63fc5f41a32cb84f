"""Settings every test shares.

Hypothesis times its own input generation and each example (``too_slow``, ``deadline``): measures of how
busy the machine is, not of the code. The unit tests run beside compiling Kubernetes on a cold machine, and
beside clusters on a warm one, so on 2 cores both fired on healthy code; the number of examples, and so what
is checked, stays Hypothesis' default.
"""

from hypothesis import HealthCheck, settings

settings.register_profile("liqo", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("liqo")

pytest_plugins = ["tests.timing", "tests.cpu_by_program", "tests.lanes"]
