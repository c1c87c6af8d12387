"""The Farkas reading of TF-FEAS-NEC (theorems.tfsvm.claims_svm.farkas_reading): the ratio
‖Aᵀy‖/(Σy·max‖A_k‖) that the claim asserts small, on an exact certificate whose rows are all
zero (0/0 before: the numerics profile's draw n = 1, T = 2, d = 1 turned it into ∞ and the
example inconclusive), on an ordinary hull selection, and on an empty certificate."""

import math
from types import SimpleNamespace

import numpy as np
import torch

from models.oracles.normsvm import norm_svm
from theorems.tfsvm.claims_svm import FARKAS_TOL, farkas_reading

DT = torch.float64


def test_zero_rows_are_an_exact_certificate():
    # n = 1, T = 2, d = 1, the selected token equal to the other: the one row reads 0 ≥ 1
    X = torch.tensor([[[0.7], [0.7]]], dtype=DT)
    Z = torch.tensor([[1.3]], dtype=DT)
    sol = norm_svm(X, Z, np.array([0]), "fro")
    assert sol.status == "infeasible"
    y_min, total, residual, ratio = farkas_reading(sol)
    assert y_min >= 0 and total > 0
    assert residual == 0.0 and ratio == 0.0


def test_hull_selection_reads_small_but_not_zero_scale():
    # x_0 = (x_1 + x_2)/2 in d = 2: infeasible, rows nonzero, the certificate y ∝ (1, 1)
    X = torch.tensor([[[0.0, 0.5], [1.0, 0.0], [-1.0, 1.0]]], dtype=DT)
    Z = torch.tensor([[0.3, -1.1]], dtype=DT)
    sol = norm_svm(X, Z, np.array([0]), "fro")
    assert sol.status == "infeasible"
    y_min, total, residual, ratio = farkas_reading(sol)
    assert y_min >= 0 and total > 0
    assert math.isfinite(ratio) and ratio <= FARKAS_TOL
    assert np.isclose(sol.duals[0], sol.duals[1], rtol=1e-6)


def test_an_empty_certificate_reads_infinite():
    A = np.array([[1.0, 0.0], [0.0, 0.0]])
    assert farkas_reading(SimpleNamespace(duals=np.zeros(2), A=A))[3] == math.inf
    # a residual that is not zero is divided by its scale: ‖Aᵀy‖ = 0.5, Σy·max‖A_k‖ = 1
    y = np.array([0.5, 0.5])
    assert farkas_reading(SimpleNamespace(duals=y, A=A))[3] == 0.5
