"""The virtual kubelet: a Node standing for a provider's offer, and the home pods bound to it run there.

Pure ``forge`` functions turn home objects into what the provider gets and remote status into home status;
the controllers around them only read caches and apply the result.
"""
