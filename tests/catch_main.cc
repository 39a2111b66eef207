// The one Catch2 main every braid test binary links.
#define CATCH_CONFIG_MAIN
#include "catch2/catch.hpp"
