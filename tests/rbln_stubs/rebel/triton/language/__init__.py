class constexpr:
    pass
