"""The conditional RealNVP flow world model, the paper's world-model ablation (`--world-model flow`): a part of the
algorithm that every RL script can use in place of its cVAE, written once beside them and imported only under that
flag. It imports no other module of the project; the script hands it its own running normaliser.
"""

import math

import torch
import torch.nn as nn


class InvertibleLinear(nn.Module):
    """Glow's invertible 1x1 convolution on R^D, LU-parameterised: y = W x with W = P L (U + diag(sign_s exp(log_s))).

    P is a fixed permutation, L unit lower-triangular, U strictly upper-triangular, so log|det W| = sum(log_s).
    Initialised at the QR factor of a Gaussian matrix (a random orthogonal W, drawn from torch's global RNG).
    """

    def __init__(self, dim: int):
        super().__init__()
        q = torch.linalg.qr(torch.randn(dim, dim)).Q
        perm, lower, upper = torch.linalg.lu(q)
        diagonal = upper.diagonal()
        self.register_buffer("perm", perm)
        self.register_buffer("sign_s", diagonal.sign())
        self.register_buffer("lower_mask", torch.ones(dim, dim).tril(-1))
        self.register_buffer("eye", torch.eye(dim))
        self.lower = nn.Parameter(lower)
        self.upper = nn.Parameter(upper.triu(1))
        self.log_s = nn.Parameter(diagonal.abs().log())

    def factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """L (unit lower-triangular) and U + diag(sign_s exp(log_s)) (upper-triangular), each (D, D)."""
        lower = self.lower * self.lower_mask + self.eye
        upper = self.upper * self.lower_mask.T + torch.diag(self.sign_s * self.log_s.exp())
        return lower, upper

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., D) -> (W x (..., D), log|det W| (...))."""
        lower, upper = self.factors()
        weight = self.perm @ lower @ upper  # (D, D)
        return x @ weight.T, self.log_s.sum().expand(x.shape[:-1])

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """y (..., D) -> W^-1 y (..., D), W^-1 = upper^-1 L^-1 P^T by two triangular solves."""
        lower, upper = self.factors()
        lower_inv = torch.linalg.solve_triangular(lower, self.eye, upper=False, unitriangular=True)
        weight_inv = torch.linalg.solve_triangular(upper, lower_inv @ self.perm.T, upper=True)  # (D, D)
        return y @ weight_inv.T


class AffineCoupling(nn.Module):
    """RealNVP affine coupling conditioned on c: the kept part of x passes unchanged, the other part becomes
    x_change * exp(log_scale) + shift, with (log_scale, shift) = MLP(x_keep, c).

    x is split into its first D // 2 and last D - D // 2 coordinates; `flip` keeps the last ones instead of the first.
    The MLP has two SiLU hidden layers, each followed by LayerNorm; its output layer starts at zero, so the coupling
    starts as the identity. The log-scale is soft-clipped to (-scale_bound, scale_bound) by a scaled tanh.
    """

    def __init__(self, dim: int, cond_dim: int, hidden_dim: int, flip: bool, scale_bound: float):
        super().__init__()
        self.sizes = [dim // 2, dim - dim // 2]
        self.flip = flip
        self.scale_bound = scale_bound
        keep_dim, change_dim = self.sizes[::-1] if flip else self.sizes
        self.net = nn.Sequential(
            nn.Linear(keep_dim + cond_dim, hidden_dim),
            nn.SiLU(),
            nn.LayerNorm(hidden_dim),
            nn.Linear(hidden_dim, hidden_dim),
            nn.SiLU(),
            nn.LayerNorm(hidden_dim),
            nn.Linear(hidden_dim, 2 * change_dim),
        )
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., D) -> (kept part, changed part)."""
        first, last = x.split(self.sizes, -1)
        return (last, first) if self.flip else (first, last)

    def join(self, keep: torch.Tensor, change: torch.Tensor) -> torch.Tensor:
        return torch.cat([change, keep] if self.flip else [keep, change], -1)

    def scale_shift(self, keep: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raw_log_scale, shift = self.net(torch.cat([keep, cond], -1)).chunk(2, -1)
        return self.scale_bound * torch.tanh(raw_log_scale / self.scale_bound), shift

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., D), cond (..., C) -> (y (..., D), log|det dy/dx| (...))."""
        keep, change = self.split(x)
        log_scale, shift = self.scale_shift(keep, cond)
        return self.join(keep, change * log_scale.exp() + shift), log_scale.sum(-1)

    def inverse(self, y: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """y (..., D), cond (..., C) -> x (..., D)."""
        keep, change = self.split(y)
        log_scale, shift = self.scale_shift(keep, cond)
        return self.join(keep, (change - shift) * (-log_scale).exp())


class FlowWorldModel(nn.Module):
    """Conditional RealNVP flow of x = (ds, r) = (s' - s, r) given c = (s, a), in normalised coordinates.

    The map x -> z is `num_couplings` steps of [InvertibleLinear, AffineCoupling], the couplings alternately keeping
    the first D // 2 and the last D - D // 2 coordinates of their input (D = |S| + 1 >= 2), with base N(0, I);
    log p(x | c) = log N(f(x; c); 0, I) + log|det df/dx|, and the loss is its negative batch mean. Samples are
    x = f^-1(z; c), z ~ N(0, I), so (s', r) is differentiable w.r.t. (s, a) through c. The interface is the cVAE's; the
    normaliser is the script's.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_dim: int,
        normaliser: nn.Module,
        num_couplings: int = 4,
        scale_bound: float = 2.0,
    ):
        super().__init__()
        self.latent_dim = self.dim = obs_dim + 1
        cond_dim = obs_dim + act_dim
        self.normaliser = normaliser  # the script's RunningNormaliser of (s, a, ds, r), one update per step
        self.cond_part, self.out_part = slice(0, cond_dim), slice(cond_dim, None)  # (s, a) and (ds, r)
        self.mixes = nn.ModuleList([InvertibleLinear(self.dim) for _ in range(num_couplings)])
        self.couplings = nn.ModuleList(
            [AffineCoupling(self.dim, cond_dim, hidden_dim, k % 2 == 1, scale_bound) for k in range(num_couplings)]
        )

    def update_normaliser(
        self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor
    ) -> None:
        """obs (..., S), actions (..., A), rewards (..., 1), next_obs (..., S)."""
        self.normaliser.update(torch.cat([obs, actions, next_obs - obs, rewards], -1))

    def condition(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.normaliser.normalise(torch.cat([obs, actions], -1), self.cond_part)

    def forward_transform(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., D), cond (..., C) -> (z (..., D), log|det dz/dx| (...))."""
        log_det = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
        for mix, coupling in zip(self.mixes, self.couplings):
            x, mix_log_det = mix(x)
            x, coupling_log_det = coupling(x, cond)
            log_det = log_det + mix_log_det + coupling_log_det
        return x, log_det

    def inverse_transform(self, z: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """z (..., D), cond (..., C) -> x (..., D)."""
        for mix, coupling in zip(reversed(self.mixes), reversed(self.couplings)):
            z = mix.inverse(coupling.inverse(z, cond))
        return z

    def log_prob(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """log p(x | c) of normalised x (..., D) given normalised cond (..., C) -> (...)."""
        z, log_det = self.forward_transform(x, cond)
        return -0.5 * (z.pow(2).sum(-1) + self.dim * math.log(2 * math.pi)) + log_det

    def loss(
        self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor
    ) -> torch.Tensor:
        """Negative mean log-likelihood of normalised (ds, r): obs (B, S), actions (B, A), rewards (B,), next_obs
        (B, S)."""
        cond = self.condition(obs, actions)  # (B, S+A)
        target = self.normaliser.normalise(torch.cat([next_obs - obs, rewards[:, None]], -1), self.out_part)  # (B, S+1)
        return -self.log_prob(target, cond).mean()

    def sample(
        self, obs: torch.Tensor, actions: torch.Tensor, n: int, noise: torch.Tensor | None = None, copies: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """n samples per pair: obs (B, S), actions (B, A) -> next_obs (B, n, S), rewards (B, n); differentiable.
        `noise` (B, n, D), the base draws z ~ N(0, I) behind the samples, is drawn here unless given. `copies` is the
        DSDPG cVAE's: every coupling of the flow conditions on its own row, so nothing can be shared between copies."""
        cond = self.condition(obs, actions)[:, None].expand(-1, n, -1)  # (B, n, S+A)
        if noise is None:
            noise = torch.randn(obs.shape[0], n, self.dim, device=obs.device)
        out = self.inverse_transform(noise, cond)  # (B, n, S+1)
        out = self.normaliser.denormalise(out, self.out_part)
        next_obs, rewards = obs[:, None] + out[..., :-1], out[..., -1]
        return next_obs, rewards
