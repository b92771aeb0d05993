"""What every floor may use and that is no part of the contract: the lazy exports of a package (:mod:`.lazy`)."""
