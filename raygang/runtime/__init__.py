"""The Ray side, by the process each part runs in:

- `scheduler/`: the scheduler actor (a detached named actor) and the ports that wire its
  control plane to Ray;
- `kinds/`: how each kind of workload runs on Ray (run in the scheduler's process, reached
  through its cluster port only), and `handoff/`, shared by the kinds whose library places
  its own group;
- `member/`: what runs inside member actors;
- `client/`: what runs in users' drivers and Ray Train controllers;
- `names.py` (every name raygang gives what it creates in Ray), `ray_private/` (every
  private Ray API used), `serving.py` (Ray Serve as raygang drives it: the deployment kind
  and the REST API's ingress), `placement.py` (actor options taking a whole bundle;
  waiting on a placement group before removing it).

`program.py`, `status.py` and `train_callback.py` are shims kept at old paths that stored
gang records and `RAY_TRAIN_CALLBACKS` settings name."""
