"""What runs in users' processes: drivers (the Python API, the REST API) reach the scheduler
actor through `connection.py`, and a Ray Train controller runs `train_callback.py`'s
`RaygangTrain`. None of it imports the scheduler's code (the actor is started from its
class, imported by `connection.start` only when it starts one)."""
