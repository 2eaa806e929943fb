"""What runs inside a gang's member actors: the actor raygang makes of the user's function
or class (`actor.py`) and the gang context its code reads (`context.py`, public as
`raygang.get_context`). Nothing of the scheduler is loaded here."""
