"""Process utilities shared by the node's processes (the daemon, the libp2p child): giving freed
heap memory back to the OS (:mod:`procutil.heap`) and the memory figures of ``node.debug_memory``
(:mod:`procutil.memdebug`). They import nothing of the project, so any layer may use them.
"""
