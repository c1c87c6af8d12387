"""Next-token prediction (spec ntp.md): the token-priority graph of 2403.08081, its attention
model, graph-SVM and finite component, and the linear NTP decoder of 2402.18551.

Modules: `data` (validated instances), `graph` (priority graphs and SCCs, exact),
`attention` (the self-attention NTP loss and its log-space gradient), `qp` (the certified
equality-constrained margin QP both SVMs share), `svm` (the graph-SVM), `finite` (W_fin and
the log-odds bridge), `linear` (the linear decoder: entropy floor, compatibility,
separability, F, W*, the NTP-SVM).
"""
