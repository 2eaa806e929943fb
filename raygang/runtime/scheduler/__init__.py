"""The scheduler actor's process: the actor (`actor.py`, the RPC facade of one
`control.ControlPlane`) and the ports it wires the plane to Ray with: the cluster
(`cluster.py`: observe, runs made by `runtime.kinds`, recovery's `leftovers.py`), the
durable store (`gcs_store.py`), metrics, scaling (`scaling.py`, `scalers.py`), and the
Train desk (`train_desk.py`: the calls of Train controllers' callbacks)."""
