"""The provider's import leaves scipy.special (150-200 ms to import) for the first kernel that
calls one of its functions; those functions compute what scipy's do."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from scipy import special as scipy_special

from ort_ep_cpu._lazy import special


def test_importing_the_plugin_does_not_import_scipy_special():
    code = "import sys, ort_ep_cpu.plugin; print('scipy.special' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_lazy_functions_are_scipys():
    x = np.linspace(-3, 3, 13, dtype=np.float32)
    np.testing.assert_array_equal(special.erf(x), scipy_special.erf(x))
    into = x.copy()
    assert special.expit(into, out=into) is into  # ufunc keywords pass through (in-place kernels)
    np.testing.assert_array_equal(into, scipy_special.expit(x))
    np.testing.assert_array_equal(special.ndtri(np.array([0.25, 0.5])), scipy_special.ndtri(np.array([0.25, 0.5])))
    assert special.erf is special.erf  # made once per name
