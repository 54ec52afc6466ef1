#include "daemon/common/heap_optional.h"

#include <string>
#include <utility>
#include <vector>

#include "catch2/catch.hpp"

namespace ard {
namespace {

struct Big {
  std::string name;
  char bytes[400] = {};
};

TEST_CASE("An absent HeapOptional costs a pointer, whatever the size of T") {
  STATIC_REQUIRE(sizeof(HeapOptional<Big>) == sizeof(void*));
  HeapOptional<Big> none;
  CHECK_FALSE(none);
  CHECK_FALSE(none.has_value());
  HeapOptional<Big> from_nullopt = std::nullopt;
  CHECK_FALSE(from_nullopt);
  std::vector<HeapOptional<Big>> dense(1000);
  for (const auto& entry : dense) CHECK_FALSE(entry);
}

TEST_CASE("A present HeapOptional reads and writes its value as std::optional does") {
  HeapOptional<std::string> s = std::string("abc");
  REQUIRE(s);
  CHECK(*s == "abc");
  CHECK(s->size() == 3);
  CHECK(s.value() == "abc");
  s->append("d");
  CHECK(*s == "abcd");
  const HeapOptional<std::string>& c = s;
  CHECK(c->size() == 4);
  CHECK(*c == "abcd");
  CHECK(c.value() == "abcd");
}

TEST_CASE("HeapOptional copies are deep") {
  HeapOptional<std::string> a = std::string("x");
  HeapOptional<std::string> b = a;
  REQUIRE(b);
  CHECK(&*b != &*a);
  *b = "y";
  CHECK(*a == "x");
  CHECK(*b == "y");

  HeapOptional<std::string> none;
  HeapOptional<std::string> copy_of_none = none;
  CHECK_FALSE(copy_of_none);
}

TEST_CASE("HeapOptional copy assignment: present into present reuses the value's storage") {
  HeapOptional<std::string> a = std::string("first");
  HeapOptional<std::string> b = std::string("second");
  const std::string* storage = &*a;
  a = b;
  CHECK(&*a == storage);
  CHECK(*a == "second");
  CHECK(*b == "second");

  HeapOptional<std::string> none;
  a = none;  // absent into present
  CHECK_FALSE(a);
  a = b;  // present into absent
  REQUIRE(a);
  CHECK(*a == "second");
  CHECK(&*a != &*b);

  HeapOptional<std::string>& alias = a;
  a = alias;  // self-assignment keeps the value
  REQUIRE(a);
  CHECK(*a == "second");
}

TEST_CASE("HeapOptional moves take the value's storage and leave the source absent") {
  HeapOptional<std::string> a = std::string("moved");
  const std::string* storage = &*a;
  HeapOptional<std::string> b = std::move(a);
  REQUIRE(b);
  CHECK(&*b == storage);
  CHECK_FALSE(a);  // NOLINT(bugprone-use-after-move): unique_ptr's moved-from state is defined

  HeapOptional<std::string> c;
  c = std::move(b);
  REQUIRE(c);
  CHECK(&*c == storage);
  CHECK_FALSE(b);  // NOLINT(bugprone-use-after-move)

  STATIC_REQUIRE(std::is_nothrow_move_constructible<HeapOptional<Big>>::value);
  STATIC_REQUIRE(std::is_nothrow_move_assignable<HeapOptional<Big>>::value);
}

TEST_CASE("HeapOptional assignment from a value, from nullopt, reset and emplace") {
  HeapOptional<std::string> a;
  a = std::string("v");  // into absent
  REQUIRE(a);
  CHECK(*a == "v");
  const std::string* storage = &*a;
  const std::string w = "w";
  a = w;  // into present: in place
  CHECK(&*a == storage);
  CHECK(*a == "w");
  a = std::nullopt;
  CHECK_FALSE(a);

  CHECK(a.emplace(3, 'z') == "zzz");
  REQUIRE(a);
  CHECK(*a == "zzz");
  a.reset();
  CHECK_FALSE(a);
}

}  // namespace
}  // namespace ard
