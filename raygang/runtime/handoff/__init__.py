"""Hand-off gangs, shared by the kinds whose Ray library places its own group (Serve
applications, Ray Jobs, Ray Train runs): the budget of held bundles, claimed and adopted
(`budget.py`), and a Train run's worker groups in it (`train.py`: a run queued on its own,
or one inside a raygang job's budget). Not a kind: the kinds import it, it imports none."""
