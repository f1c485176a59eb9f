"""VM request models arrive with the requests issue; roles are in :mod:`vmrequests.roles`."""
